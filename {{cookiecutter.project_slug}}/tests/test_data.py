"""Specifications of the data pipeline: order and every random draw are functions of the seed."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.data import make_datasets
from {{ cookiecutter.project_slug }}.utils.loader import EpochSampler, KeyedRandomness, make_loader

SEED = 3
CONFIG = Config(seed=SEED)


def one_epoch(seed: int, num_workers: int, epoch: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Everything a fresh training loader yields in one epoch, concatenated."""
    train_set, _ = make_datasets(CONFIG)
    loader = make_loader(train_set, batch_size=32, seed=seed, train=True, num_workers=num_workers)
    loader.sampler.set_epoch(epoch)
    batches = list(loader)
    return torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_seed_gives_the_same_order_and_augmented_values_from_two_fresh_loaders(num_workers):
    first_images, first_labels = one_epoch(SEED, num_workers)
    second_images, second_labels = one_epoch(SEED, num_workers)
    assert torch.equal(first_labels, second_labels)
    assert torch.equal(first_images, second_images)


def test_the_worker_count_changes_no_augmented_value():
    assert torch.equal(one_epoch(SEED, 0)[0], one_epoch(SEED, 2)[0])


def test_another_seed_gives_another_order_and_other_values():
    images, labels = one_epoch(SEED, 0)
    other_images, other_labels = one_epoch(SEED + 1, 0)
    assert not torch.equal(labels, other_labels)
    assert not torch.equal(images, other_images)


def test_each_epoch_has_its_own_order_and_augmentation():
    images, labels = one_epoch(SEED, 0, epoch=0)
    next_images, next_labels = one_epoch(SEED, 0, epoch=1)
    assert not torch.equal(labels, next_labels)
    assert not torch.equal(images, next_images)


def test_the_example_augmentation_draws_from_all_three_global_generators():
    """The example teaches the ordinary style, so a user's copy of it is covered by the loader."""
    train_set, _ = make_datasets(CONFIG)
    draws = []
    for seed_one in (random.seed, np.random.seed, torch.manual_seed):
        for generator in (random.seed, np.random.seed, torch.manual_seed):
            generator(0)
        first = train_set[5][0]
        for generator in (random.seed, np.random.seed, torch.manual_seed):
            generator(0)
        seed_one(1)  # only this generator moves
        draws.append(torch.equal(train_set[5][0], first))
    assert draws == [False, False, False]


def test_a_samples_draws_are_a_function_of_seed_epoch_and_index_not_of_global_state():
    train_set, _ = make_datasets(CONFIG)
    keyed = KeyedRandomness(train_set, seed=SEED, stream=0)
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    first = keyed[(2, 5)][0]
    random.seed(99)  # what a worker, or earlier samples, would have done to the global generators
    np.random.seed(99)
    torch.manual_seed(99)
    assert torch.equal(keyed[(2, 5)][0], first)
    assert torch.equal(keyed.__getitems__([(0, 1), (2, 5)])[1][0], first)  # within a batch too
    assert not torch.equal(keyed[(3, 5)][0], first)  # another epoch
    assert not torch.equal(KeyedRandomness(train_set, seed=SEED + 1, stream=0)[(2, 5)][0], first)  # another seed


def test_fetching_in_the_main_process_leaves_the_training_generators_where_they_were():
    """With 0 workers the dataset runs in the training process: dropout must draw the same masks
    as if the dataset had drawn nothing."""
    train_set, _ = make_datasets(CONFIG)
    keyed = KeyedRandomness(train_set, seed=SEED, stream=0)
    random.seed(4)
    np.random.seed(4)
    torch.manual_seed(4)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(4)
    np.random.seed(4)
    torch.manual_seed(4)
    keyed.__getitems__([(0, index) for index in range(8)])
    keyed[(1, 3)]
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_validation_data_is_not_augmented_and_keeps_its_order():
    _, val_set = make_datasets(CONFIG)
    loader = make_loader(val_set, batch_size=64, seed=SEED, train=False)
    loaded = torch.cat([batch[0] for batch in loader])
    assert torch.equal(loaded, val_set.images)


def test_the_sampler_can_start_mid_epoch_at_the_same_place():
    sampler = EpochSampler(1600, SEED, shuffle=True)
    sampler.set_epoch(1)
    full = list(sampler)
    sampler.set_epoch(1, start=64)
    assert list(sampler) == full[64:]


@pytest.mark.parametrize("size, world_size", [(1438, 1), (1600, 1), (1437, 2), (1600, 3)])
def test_a_sampler_started_at_the_very_end_of_an_epoch_yields_nothing(size, world_size):
    """What a resume from a checkpoint taken at an epoch's last step asks of it."""
    batch_size = 64
    for rank in range(world_size):
        sampler = EpochSampler(size, SEED, shuffle=True, rank=rank, world_size=world_size)
        steps = -(-len(sampler) // batch_size)
        sampler.set_epoch(0, start=steps * batch_size)
        assert len(sampler) == 0 and list(sampler) == []


def test_ranks_share_one_order_and_take_the_same_number_of_samples():
    single = [index for _, index in EpochSampler(1437, SEED, shuffle=True)]
    shards = [[index for _, index in EpochSampler(1437, SEED, shuffle=True, rank=r, world_size=2)] for r in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == 719  # padded: every rank takes the same number of steps
    assert shards[0][:5] == single[0:10:2] and shards[1][:5] == single[1:10:2]
{% if cookiecutter.dataset == "digits" %}

def test_the_digits_are_exactly_scikit_learns():
    from sklearn.datasets import load_digits

    from {{ cookiecutter.project_slug }}.data import load_digits_arrays

    images, labels = load_digits_arrays()
    digits = load_digits()
    assert np.array_equal(images[:, 0], (digits.images / 16.0).astype(np.float32))
    assert np.array_equal(labels, digits.target)
{%- endif %}
