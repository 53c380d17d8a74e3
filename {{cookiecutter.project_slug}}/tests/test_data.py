"""Specifications of the data pipeline beyond tests/test_loader.py: what a dataset declares it draws
from, a failing sample named, and how the sampler shares and resumes an epoch."""

from __future__ import annotations

import operator
import random
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Subset

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.loader import (
    ShardedEpochSampler,
    ignore_sigint_in_worker,
    make_sharded_loader,
)
from {{ cookiecutter.project_slug }}.train import first
from {{ cookiecutter.project_slug }}.utils.data import EpochSampler, KeyedRandomness, declared_draws
from {{ cookiecutter.project_slug }}.utils.repro import Stream, derive_seed

from conftest import PACKAGE, SAMPLES, DrawsFrom, python_env

SEED = 3
CONFIG = Config(seed=SEED)


def train_set():
    return first(task.make_datasets(CONFIG)[0], SAMPLES)


def generator_states() -> tuple:
    return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state()


def test_only_the_generators_a_dataset_declares_are_seeded_before_each_sample():
    """What draws_from saves (seeding the others costs µs a sample), and what it must keep: the
    declared generator is still keyed."""
    keyed = KeyedRandomness(DrawsFrom(train_set(), "torch", draws_from=("torch",)), seed=SEED, stream=0)
    keys = [(2, index) for index in range(8)]
    torch.manual_seed(1)
    before = generator_states()
    first_fetch = keyed.__getitems__(keys)
    after = generator_states()
    assert after[:2] == before[:2]  # random and numpy: untouched
    assert not torch.equal(after[2], before[2])  # torch: seeded, then drawn from
    torch.manual_seed(99)
    again = keyed.__getitems__(keys)
    assert all(map(operator.is_, again, first_fetch))  # the same samples, whatever torch's state was before


def test_a_dataset_that_declares_nothing_has_all_three_global_generators_seeded():
    class Plain(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int):
            return torch.rand(1)

    assert declared_draws(Plain()) == ("random", "numpy", "torch")
    assert declared_draws(torch.utils.data.Subset(Plain(), [0, 1])) == ("random", "numpy", "torch")


class Declares(torch.utils.data.Dataset):
    def __init__(self, draws_from) -> None:
        self.draws_from = draws_from

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int):
        return torch.zeros(1)


def test_draws_from_is_found_through_every_wrapper_that_keeps_its_dataset():
    """Subset, --max-samples, a task's own wrapper: each keeps what it wraps as .dataset."""
    assert declared_draws(Subset(Subset(Declares(("numpy",)), [0, 1, 2]), [0])) == ("numpy",)
    assert declared_draws(Subset(Declares(["torch", "random"]), [0])) == ("torch", "random")  # any sequence

    class Declaring(Subset):
        draws_from = ("random",)

    assert declared_draws(Declaring(Declares(("numpy",)), [0])) == ("random",)  # the outermost says


@pytest.mark.parametrize("draws_from, refusal", [
    ("torch", "draws_from is the string 'torch'; write a tuple of names, such as ('torch',)"),
    (("numpy", "cupy", "jax"), "draws_from names 'cupy', 'jax'; it may name only 'random', 'numpy', 'torch'")])
def test_a_draws_from_that_names_anything_but_the_global_generators_is_refused_with_one_line(draws_from, refusal):
    with pytest.raises(ValueError) as refused:
        declared_draws(Subset(Subset(Declares(draws_from), [0, 1]), [0]))
    assert str(refused.value) == refusal


def test_a_dataset_error_names_the_sample_and_the_original_error():
    from {{ cookiecutter.project_slug }}.utils.data import SampleError

    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            raise ValueError(f"no file for {index}")

    with pytest.raises(SampleError, match=r"^sample 3 \(epoch 2\): ValueError: no file for 3"):
        KeyedRandomness(Broken(), seed=SEED, stream=Stream.TRAIN_SAMPLE)[(1, 3)]
    with pytest.raises(SampleError, match=r"^validation sample 3: ValueError: no file for 3"):
        KeyedRandomness(Broken(), seed=SEED, stream=Stream.VAL_SAMPLE)[(0, 3)]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_validation_keeps_the_datasets_order_and_every_sample_once(world_size):
    """Unpadded, whatever the number of ranks: a validation sample counted twice would bias its figures."""
    shards = [[index for _, index in ShardedEpochSampler(103, SEED, shuffle=False, rank=rank, world_size=world_size,
                                                         pad=False)] for rank in range(world_size)]
    assert sorted(index for shard in shards for index in shard) == list(range(103))
    assert shards[0] == list(range(0, 103, world_size))  # the dataset's order, dealt out in turn


def test_each_epochs_order_comes_from_the_seeds_own_shuffle_stream():
    """Each epoch's order is torch.randperm from the seed's SHUFFLE stream at that epoch: another
    seed shuffles otherwise in every epoch, and no other stream (the samples', the steps') shares
    the shuffle's seeds."""
    for epoch in range(3):
        orders = {}
        for seed in (SEED, SEED + 1):
            sampler = EpochSampler(64, seed, shuffle=True)
            sampler.set_epoch(epoch)
            orders[seed] = sampler.order()
        generator = torch.Generator().manual_seed(derive_seed(SEED, Stream.SHUFFLE, epoch))
        assert orders[SEED] == torch.randperm(64, generator=generator).tolist()
        assert orders[SEED] != orders[SEED + 1]


@pytest.mark.parametrize("train", [True, False])
def test_make_sharded_loader_gives_the_loader_every_setting_it_takes(train):
    """Read off the loader it makes: the split's own sample stream; the shuffle and the padding for
    training only; the rank's share; the workers' settings, left out where there are no workers;
    and a generator of the loader's own for the workers' base seed."""
    dataset = list(range(10))
    loader = make_sharded_loader(dataset, 2, SEED, train, num_workers=2, persistent_workers=True, prefetch_factor=3,
                                 rank=1, world_size=4)
    sampler = loader.sampler
    assert (sampler.shuffle, sampler.pad, sampler.rank, sampler.world_size) == (train, train, 1, 4)
    assert loader.dataset.base == derive_seed(SEED, Stream.TRAIN_SAMPLE if train else Stream.VAL_SAMPLE)
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (2, True, 3)
    assert loader.worker_init_fn is ignore_sigint_in_worker
    assert loader.generator.initial_seed() == derive_seed(SEED, Stream.LOADER)
    without_workers = make_sharded_loader(dataset, 2, SEED, train, persistent_workers=True, prefetch_factor=3)
    assert (without_workers.persistent_workers, without_workers.prefetch_factor) == (False, None)
    one_worker = make_sharded_loader(dataset, 2, SEED, train, num_workers=1, persistent_workers=True,
                                     prefetch_factor=3)
    assert (one_worker.persistent_workers, one_worker.prefetch_factor) == (True, 3)
    assert make_sharded_loader(dataset, 2, SEED, train, num_workers=1).persistent_workers is False  # not by default


@pytest.mark.parametrize("pad", [True, False])
def test_a_samplers_length_is_the_number_of_indices_it_yields(pad):
    for size in (7, 8):
        for world_size in (1, 2, 3):
            for rank in range(world_size):
                for start in (0, world_size):
                    sampler = ShardedEpochSampler(size, SEED, shuffle=True, rank=rank, world_size=world_size,
                                                  pad=pad)
                    sampler.set_epoch(1, start=start)
                    assert len(sampler) == len(list(sampler)), (size, world_size, rank, start)


def test_the_sampler_can_start_mid_epoch_at_the_same_place():
    sampler = ShardedEpochSampler(1600, SEED, shuffle=True)
    sampler.set_epoch(1)
    full = list(sampler)
    sampler.set_epoch(1, start=64)
    assert list(sampler) == full[64:]


@pytest.mark.parametrize("size, world_size", [(1438, 1), (1600, 1), (1437, 2), (1600, 3)])
def test_a_sampler_started_at_the_very_end_of_an_epoch_yields_nothing(size, world_size):
    """What a resume from a checkpoint taken at an epoch's last step asks of it."""
    batch = 48  # a global batch that each world size shares
    for rank in range(world_size):
        sampler = ShardedEpochSampler(size, SEED, shuffle=True, rank=rank, world_size=world_size)
        steps = -(-(size + (-size % world_size)) // batch)
        sampler.set_epoch(0, start=steps * batch)
        assert len(sampler) == 0 and list(sampler) == []


@pytest.mark.parametrize("size, world_size", [(1437, 2), (1437, 3), (1600, 3), (7, 4)])
def test_ranks_take_disjoint_equal_shares_that_cover_the_set(size, world_size):
    shards = [[index for _, index in ShardedEpochSampler(size, SEED, shuffle=True, rank=r, world_size=world_size)]
              for r in range(world_size)]
    assert len({len(shard) for shard in shards}) == 1  # padded: every rank takes the same number of steps
    padding = -size % world_size
    taken = [index for shard in shards for index in shard]
    assert sorted(set(taken)) == list(range(size))  # every sample
    assert len(taken) == size + padding  # and no more twice than the padding needs


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_each_global_step_sees_the_same_samples_whatever_the_number_of_processes(world_size):
    """Global step j trains on the j-th slice of the epoch's order: the union of the ranks' j-th batches."""
    global_batch, size = 16, 100
    single = [index for _, index in EpochSampler(size, SEED, shuffle=True)]
    shards = [[index for _, index in ShardedEpochSampler(size, SEED, shuffle=True, rank=r, world_size=world_size)]
              for r in range(world_size)]
    per_rank = global_batch // world_size
    for step in range(size // global_batch):
        union = sorted(i for shard in shards for i in shard[step * per_rank:(step + 1) * per_rank])
        assert union == sorted(single[step * global_batch:(step + 1) * global_batch])


def test_a_loader_worker_ignores_ctrl_c_from_its_init_function_on():
    previous = signal.getsignal(signal.SIGINT)
    try:
        ignore_sigint_in_worker(0)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_workers_start_with_ctrl_c_ignored_and_the_training_process_then_takes_its_handler_back(monkeypatch):
    """What the test below sees through processes: a stand-in for the DataLoader's start of its
    workers reads the handler in force meanwhile. Ignored, a new worker keeps it ignored, under fork
    and spawn alike; only the main thread may set a handler, so another thread's loader leaves it."""
    in_force = []

    def starting_workers(loader: DataLoader):
        in_force.append(signal.getsignal(signal.SIGINT))
        return iter(())

    monkeypatch.setattr(DataLoader, "_get_iterator", starting_workers)

    def handler(signum, frame) -> None:
        pass

    def start(workers: int) -> None:
        iter(make_sharded_loader(train_set(), batch_size=8, seed=SEED, train=True, num_workers=workers))

    previous = signal.signal(signal.SIGINT, handler)
    try:
        start(2)
        start(0)  # no workers: nothing to protect
        assert signal.getsignal(signal.SIGINT) is handler
        thread = threading.Thread(target=start, args=(2,))
        thread.start()
        thread.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert in_force == [signal.SIG_IGN, handler, handler]


# A loader whose workers get a SIGINT as soon as they exist, as Ctrl-C sends one to every process of
# the terminal's group; then its epoch.
WORKERS_GET_CTRL_C = """
import os, signal, sys
import torch.multiprocessing

torch.multiprocessing.set_start_method(sys.argv[1], force=True)
from {package} import task
from {package}.config import Config
from {package}.train import first
from {package}.engine.loader import make_sharded_loader

if __name__ == "__main__":
    loader = make_sharded_loader(first(task.make_datasets(Config())[0], 64), batch_size=8, seed=0, train=True,
                                 num_workers=2)
    batches = iter(loader)
    for worker in batches._workers:  # at once: a spawned worker is still importing torch
        os.kill(worker.pid, signal.SIGINT)
    print(sum(1 for _ in batches))
"""


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_loader_workers_leave_ctrl_c_to_the_training_process_however_they_were_started(start_method, tmp_path):
    """The training process finishes its step on Ctrl-C and stops; its workers must not die of it
    first, or the step ends on a dead worker instead (spawn is macOS's and Windows' way)."""
    script = tmp_path / "workers_get_ctrl_c.py"  # a file: spawn's workers re-import the main module
    script.write_text(WORKERS_GET_CTRL_C.format(package=PACKAGE))
    ended = subprocess.run([sys.executable, str(script), start_method], capture_output=True, text=True,
                           env=python_env(), timeout=300)
    assert ended.returncode == 0, ended.stderr[-2000:]
    assert ended.stdout.strip() == "8"  # every batch of the epoch
