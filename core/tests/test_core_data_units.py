"""utils/data.py in this process, piece by piece: what a wrapper declares, the words of a refusal,
what make_loader hands the DataLoader, and one sample fetched by its key."""

from __future__ import annotations

import random

import pytest
from repro_core.utils.data import KeyedRandomness, declared_draws, make_loader
from repro_core.utils.repro import Stream, derive_seed, keyed_seed
from torch.utils.data import Dataset


class Draws(Dataset):
    """Sample i: (i, a draw from Python's random), under whatever seed the caller set."""

    draws_from = ("random",)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, float]:
        return index, random.random()


class Bare(Dataset):
    """A wrapper that keeps what it wraps as `.dataset` (as Subset does) and says nothing itself."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset


class Torch(Bare):
    draws_from = ("torch",)  # its own declaration


class Nothing(Bare):
    draws_from = ()  # its own declaration: nothing to seed


def test_a_wrapper_that_declares_its_draws_is_taken_at_its_word_and_one_that_does_not_is_looked_through():
    assert declared_draws(Torch(Draws())) == ("torch",)
    assert declared_draws(Nothing(Draws())) == ()
    assert declared_draws(Bare(Draws())) == ("random",)  # the wrapped dataset's
    assert declared_draws(Bare(Bare(Torch(Draws())))) == ("torch",)


def test_unknown_generators_are_refused_naming_each_and_the_three_that_exist():
    dataset = Draws()
    dataset.draws_from = ("cuda", "jax")
    with pytest.raises(ValueError) as refused:
        declared_draws(dataset)
    assert str(refused.value) == "draws_from names 'cuda', 'jax'; it may name only 'random', 'numpy', 'torch'"


@pytest.mark.parametrize("train", [True, False])
def test_make_loader_hands_the_dataloader_its_workers_and_a_generator_of_the_loader_stream(train):
    loader = make_loader(Draws(), 4, seed=9, train=train, num_workers=2)
    assert loader.num_workers == 2 and loader.batch_size == 4
    assert loader.generator.initial_seed() == derive_seed(9, Stream.LOADER)
    assert loader.sampler.shuffle is train and loader.dataset.base == derive_seed(
        9, Stream.TRAIN_SAMPLE if train else Stream.VAL_SAMPLE)


def test_one_sample_fetched_by_its_key_is_the_datasets_sample_under_the_keys_seed():
    keyed = KeyedRandomness(Draws(), seed=5, stream=Stream.TRAIN_SAMPLE)
    index, drawn = keyed[(2, 3)]
    random.seed(keyed_seed(derive_seed(5, Stream.TRAIN_SAMPLE), 2, 3))
    assert (index, drawn) == (3, random.random())
    assert keyed[(2, 3)] == keyed.__getitems__([(2, 3)])[0] != keyed[(1, 3)]
