"""engine/loader.py: utils/data.py's keyed loader grown for a run. Ranks share one order (training
padded with the order's own beginning, validation never), a resumed epoch skips exactly what was
trained on, and workers leave Ctrl-C to the training process."""

from __future__ import annotations

import signal
import threading

import pytest
from core_helpers import Augmented, indices, shuffle_oracle
from repro_core.engine.loader import (
    CtrlCSafeLoader,
    ShardedEpochSampler,
    ignore_sigint_in_worker,
    make_sharded_loader,
)
from repro_core.utils.data import EpochSampler
from repro_core.utils.repro import Stream, derive_seed
from torch.utils.data import DataLoader, Dataset

SEED = 5


def test_one_process_takes_the_student_samplers_order_whole():
    """ShardedEpochSampler on one process is utils/data.py's EpochSampler: the two sizes train on one order."""
    for epoch in range(3):
        single, sharded = EpochSampler(23, SEED, shuffle=True), ShardedEpochSampler(23, SEED, shuffle=True)
        single.set_epoch(epoch)
        sharded.set_epoch(epoch)
        assert list(sharded) == list(single) == [(epoch, index) for index in shuffle_oracle(23, SEED, epoch)]


def test_validation_is_shared_among_ranks_each_sample_exactly_once():
    shares = [indices(make_sharded_loader(Augmented(23), batch_size=5, seed=SEED, train=False, rank=rank,
                                          world_size=3)) for rank in range(3)]
    assert sorted(sum(shares, [])) == list(range(23))  # each exactly once over the ranks
    assert shares[0] == list(range(0, 23, 3))  # the dataset's order, dealt out in turn


# (1, 4), (3, 8): a split smaller than its padding (a tiny validation set, a last shard) pads with
# its order again and again, so that every rank still takes the same number of steps.
@pytest.mark.parametrize(("size", "world_size"), [(24, 4), (22, 4), (7, 3), (5, 8), (1, 4), (3, 8)])
def test_ranks_share_one_order_training_pads_with_its_beginning(size: int, world_size: int) -> None:
    order = shuffle_oracle(size, SEED, 2)
    padded = [order[position % size] for position in range(size + -size % world_size)]  # the order, cycled
    shares = []
    for rank in range(world_size):
        sampler = ShardedEpochSampler(size, seed=SEED, shuffle=True, rank=rank, world_size=world_size)
        sampler.set_epoch(2)
        shares.append([index for _, index in sampler])
        assert len(sampler) == len(shares[-1]) == len(padded) // world_size
    # global position j*w + r is rank r's j-th sample: the ranks interleave back into the padded order
    assert [shares[r][j] for j in range(len(padded) // world_size) for r in range(world_size)] == padded
    if size % world_size == 0:
        assert sorted(sum(shares, [])) == list(range(size))  # disjoint, and together the whole set


@pytest.mark.parametrize(("world_size", "start"), [(1, 0), (1, 4), (1, 21), (1, 22), (2, 6), (4, 20)])
def test_set_epoch_start_skips_exactly_the_first_start_samples(world_size: int, start: int) -> None:
    order = shuffle_oracle(22, SEED, 1)
    padded = order + order[: -22 % world_size]
    for rank in range(world_size):
        sampler = ShardedEpochSampler(22, seed=SEED, shuffle=True, rank=rank, world_size=world_size)
        sampler.set_epoch(1, start)
        got = list(sampler)
        assert got == [(1, index) for index in padded[start + rank :: world_size]]
        assert len(sampler) == len(got)


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_resumed_epochs_start_skips_nothing_of_the_epochs_after_it(world_size: int) -> None:
    """A run resumed mid-epoch skips that epoch's first samples only: the next set_epoch, with no
    start, takes its epoch whole."""
    order = shuffle_oracle(22, SEED, 2)
    padded = order + order[: -22 % world_size]
    for rank in range(world_size):
        sampler = ShardedEpochSampler(22, seed=SEED, shuffle=True, rank=rank, world_size=world_size)
        sampler.set_epoch(1, 6)
        sampler.set_epoch(2)
        assert list(sampler) == [(2, index) for index in padded[rank::world_size]]
        assert len(sampler) == len(padded) // world_size


def test_the_sharded_loader_takes_every_setting_it_is_given():
    loader = make_sharded_loader(Augmented(10), 2, SEED, True, num_workers=2, persistent_workers=True,
                                 prefetch_factor=3, rank=1, world_size=4)
    sampler = loader.sampler
    assert (sampler.shuffle, sampler.pad, sampler.rank, sampler.world_size) == (True, True, 1, 4)
    assert loader.dataset.base == derive_seed(SEED, Stream.TRAIN_SAMPLE)
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (2, True, 3)
    assert loader.generator.initial_seed() == derive_seed(SEED, Stream.LOADER)
    without_workers = make_sharded_loader(Augmented(10), 2, SEED, False, persistent_workers=True, prefetch_factor=3)
    assert (without_workers.persistent_workers, without_workers.prefetch_factor) == (False, None)
    assert without_workers.sampler.pad is False  # validation never pads


class SigintDisposition(Dataset):
    """1 where the process that loads the sample ignores SIGINT, else 0."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> int:
        return int(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)


def test_workers_start_ignoring_sigint_and_the_main_process_gets_its_handler_back() -> None:
    """No worker_init_fn here: the workers inherit the ignored signal from CtrlCSafeLoader itself."""

    def handler(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGINT, handler)
    try:
        iterator = iter(CtrlCSafeLoader(SigintDisposition(), batch_size=1, num_workers=1))
        assert signal.getsignal(signal.SIGINT) is handler
        assert [int(batch) for batch in iterator] == [1, 1]
        plain = DataLoader(SigintDisposition(), batch_size=1, num_workers=1)
        assert [int(batch) for batch in plain] == [0, 0]  # control: a plain loader's workers keep the handler
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_workers_that_fail_to_start_still_give_the_main_process_its_handler_back(monkeypatch) -> None:
    """Starting the workers can fail (too many open files, no memory for a process): the error is
    raised, and Ctrl-C is this process's own again, not left ignored for the rest of its life."""

    def handler(signum: int, frame: object) -> None:
        pass

    def fails_to_start(loader):
        raise OSError("[Errno 24] Too many open files")

    previous = signal.signal(signal.SIGINT, handler)
    monkeypatch.setattr(DataLoader, "_get_iterator", fails_to_start)
    try:
        with pytest.raises(OSError, match="Too many open files"):
            iter(CtrlCSafeLoader(SigintDisposition(), batch_size=1, num_workers=1))
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_loader_with_workers_iterated_in_another_thread_loads_as_a_plain_one_does() -> None:
    """Only the main thread may set a signal handler: a prefetching or evaluation thread (a
    notebook's background job) that iterates the loader gets its samples, not a ValueError, and
    leaves the main thread's Ctrl-C handler as it was."""
    before = signal.getsignal(signal.SIGINT)
    loaded: list = []

    def load() -> None:
        try:
            loaded.extend(int(batch) for batch in CtrlCSafeLoader(SigintDisposition(), batch_size=1, num_workers=1))
        except Exception as error:  # what the thread raised, for the assertion below
            loaded.append(error)

    thread = threading.Thread(target=load)
    thread.start()
    thread.join()
    # The workers keep what they inherit (no handler was changed to start them): SIGINT ignored only
    # where this process ignores it (a background job's shell may have started it so).
    assert loaded == [int(before is signal.SIG_IGN)] * 2
    assert signal.getsignal(signal.SIGINT) is before


def test_ignore_sigint_in_worker_ignores_sigint_and_make_sharded_loader_installs_it() -> None:
    """Ctrl-C only: a worker still ends on SIGTERM, as the loader's shutdown and a scheduler send it."""
    previous, term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        ignore_sigint_in_worker(0)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is term
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, term)
    loader = make_sharded_loader(Augmented(4), batch_size=2, seed=SEED, train=True, num_workers=1)
    assert isinstance(loader, CtrlCSafeLoader) and loader.worker_init_fn is ignore_sigint_in_worker
