"""Specifications of the data pipeline: order and every random draw are functions of the seed."""

from __future__ import annotations

import operator
import random

import numpy as np
import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.train import first
from {{ cookiecutter.project_slug }}.utils.data import EpochSampler, KeyedRandomness, make_loader
from {{ cookiecutter.project_slug }}.utils.repro import Stream

from conftest import BATCH, SAMPLES, DrawsFrom

SEED = 3
CONFIG = Config(seed=SEED)


def train_set():
    return first(task.make_datasets(CONFIG)[0], SAMPLES)


def flat(batches) -> torch.Tensor:
    """Every input tensor of a list of (input, target) batches, as one flat float tensor."""
    return torch.cat([torch.as_tensor(batch[0]).reshape(-1).double() for batch in batches])


def one_epoch(seed: int, num_workers: int, epoch: int = 0) -> torch.Tensor:
    """Everything a fresh training loader yields in one epoch."""
    loader = make_loader(train_set(), batch_size=BATCH, seed=seed, train=True, num_workers=num_workers)
    loader.sampler.set_epoch(epoch)
    return flat(list(loader))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_seed_gives_the_same_order_and_augmented_values_from_two_fresh_loaders(num_workers):
    assert torch.equal(one_epoch(SEED, num_workers), one_epoch(SEED, num_workers))


def test_the_worker_count_changes_no_augmented_value():
    assert torch.equal(one_epoch(SEED, 0), one_epoch(SEED, 2))


def test_another_seed_gives_another_order():
    assert not torch.equal(one_epoch(SEED, 0), one_epoch(SEED + 1, 0))


def test_each_epoch_has_its_own_order():
    assert not torch.equal(one_epoch(SEED, 0, epoch=0), one_epoch(SEED, 0, epoch=1))


def augmented(dataset, key) -> torch.Tensor:
    return torch.as_tensor(KeyedRandomness(dataset, seed=SEED, stream=0)[key][0]).double()


def test_a_samples_draws_are_a_function_of_seed_epoch_and_index_not_of_global_state():
    dataset = train_set()
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    first_draw = augmented(dataset, (2, 5))
    random.seed(99)  # what a worker, or earlier samples, would have done to the global generators
    np.random.seed(99)
    torch.manual_seed(99)
    assert torch.equal(augmented(dataset, (2, 5)), first_draw)
    keyed = KeyedRandomness(dataset, seed=SEED, stream=0)
    assert torch.equal(torch.as_tensor(keyed.__getitems__([(0, 1), (2, 5)])[1][0]).double(), first_draw)  # in a batch


@pytest.mark.skipif(not hasattr(task, "random_shift_contrast_noise"),
                    reason="about the example's augmentation, which this project's task.py replaced")
def test_example_data_keys_that_differ_in_one_part_give_other_augmentations():
    """Another epoch, another index (the same image), another stream or seed: other draws. A key
    that dropped a part would give every sample of an epoch the same augmentation."""
    dataset = train_set()
    reference = augmented(dataset, (2, 5))
    assert not torch.equal(augmented(dataset, (3, 5)), reference)  # epoch
    repeated = torch.utils.data.ConcatDataset([dataset, dataset])  # sample 5 again, at another index
    assert not torch.equal(augmented(repeated, (2, 5 + len(dataset))), reference)
    assert not torch.equal(torch.as_tensor(KeyedRandomness(dataset, SEED, 1)[(2, 5)][0]).double(), reference)
    assert not torch.equal(torch.as_tensor(KeyedRandomness(dataset, SEED + 1, 0)[(2, 5)][0]).double(), reference)


@pytest.mark.skipif(not hasattr(task, "random_shift_contrast_noise"),
                    reason="about the example's augmentation, which this project's task.py replaced")
def test_example_data_the_augmentation_draws_from_all_three_global_generators():
    """The example teaches the ordinary style, so a user's copy of it is covered by the loader."""
    dataset = train_set()
    draws = []
    for seed_one in (random.seed, np.random.seed, torch.manual_seed):
        for generator in (random.seed, np.random.seed, torch.manual_seed):
            generator(0)
        reference = dataset[5][0]
        for generator in (random.seed, np.random.seed, torch.manual_seed):
            generator(0)
        seed_one(1)  # only this generator moves
        draws.append(torch.equal(dataset[5][0], reference))
    assert draws == [False, False, False]


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


def loader_epochs(dataset, workers: int) -> torch.Tensor:
    loader = make_loader(dataset, batch_size=BATCH, seed=SEED, train=True, num_workers=workers)
    return flat(list(loader))


def test_negative_control_a_generator_the_loader_does_not_seed_changes_with_the_worker_count():
    """The run-level test (test_a_dataset_that_declares_fewer_generators_...) could not pass by luck:
    a dataset's draw from a generator that is left unseeded differs between 0 and 2 workers."""
    undeclared = DrawsFrom(train_set(), "torch", draws_from=())  # a lie, which train.py would refuse
    assert not torch.equal(loader_epochs(undeclared, 0), loader_epochs(undeclared, 2))


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


def test_validation_keeps_the_datasets_order_and_every_sample_once():
    sampler = EpochSampler(103, SEED, shuffle=False, world_size=1, pad=False)
    assert [index for _, index in sampler] == list(range(103))


def test_the_sampler_can_start_mid_epoch_at_the_same_place():
    sampler = EpochSampler(1600, SEED, shuffle=True)
    sampler.set_epoch(1)
    full = list(sampler)
    sampler.set_epoch(1, start=64)
    assert list(sampler) == full[64:]


@pytest.mark.parametrize("size, world_size", [(1438, 1), (1600, 1), (1437, 2), (1600, 3)])
def test_a_sampler_started_at_the_very_end_of_an_epoch_yields_nothing(size, world_size):
    """What a resume from a checkpoint taken at an epoch's last step asks of it."""
    batch = 48  # a global batch that each world size shares
    for rank in range(world_size):
        sampler = EpochSampler(size, SEED, shuffle=True, rank=rank, world_size=world_size)
        steps = -(-(size + (-size % world_size)) // batch)
        sampler.set_epoch(0, start=steps * batch)
        assert len(sampler) == 0 and list(sampler) == []


@pytest.mark.parametrize("size, world_size", [(1437, 2), (1437, 3), (1600, 3), (7, 4)])
def test_ranks_take_disjoint_equal_shares_that_cover_the_set(size, world_size):
    shards = [[index for _, index in EpochSampler(size, SEED, shuffle=True, rank=r, world_size=world_size)]
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
    shards = [[index for _, index in EpochSampler(size, SEED, shuffle=True, rank=r, world_size=world_size)]
              for r in range(world_size)]
    per_rank = global_batch // world_size
    for step in range(size // global_batch):
        union = sorted(i for shard in shards for i in shard[step * per_rank:(step + 1) * per_rank])
        assert union == sorted(single[step * global_batch:(step + 1) * global_batch])
{%- if cookiecutter.dataset == "digits" %}


@pytest.mark.skipif(not hasattr(task, "load_digits_arrays"), reason="about the example's digits")
def test_example_data_the_digits_are_exactly_scikit_learns():
    from sklearn.datasets import load_digits

    images, labels = task.load_digits_arrays()
    digits = load_digits()
    assert np.array_equal(images[:, 0], (digits.images / 16.0).astype(np.float32))
    assert np.array_equal(labels, digits.target)
{%- endif %}
