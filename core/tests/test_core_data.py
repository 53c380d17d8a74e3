"""utils/data.py: the keyed loader. Its order is a function of (seed, epoch), each sample's draws a
function of (seed, epoch, index), so what it yields (and what a model learns from it) does not depend
on the number of workers; ranks share one order; a resume skips exactly what was trained on."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from core_helpers import Augmented, indices, shuffle_oracle
from repro_core.utils.data import EpochSampler, SampleError, declared_draws, make_loader
from repro_core.utils.repro import Stream, derive_seed, keyed_seed, seed_step, state_dict_sha256
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

SEED = 5


class NumpyAugmented(Augmented):
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.full((4,), float(index)) + torch.from_numpy(np.random.normal(size=4)).float(), index


class TorchOnly(Augmented):
    draws_from = ("torch",)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.full((4,), float(index)) + torch.randn(4), index


@pytest.fixture(autouse=True)
def global_generators() -> Iterator[None]:
    """Puts the global generators back: a loader with 0 workers seeds them in this process."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


def keyed_sample(dataset: Dataset, seed: int, stream: int, epoch: int, index: int) -> Any:
    """dataset[index] drawn with every global generator seeded as documented, set here by hand."""
    key = keyed_seed(derive_seed(seed, stream), epoch, index)
    random.seed(key)
    np.random.seed(key & 0xFFFFFFFF)
    torch.manual_seed(key)
    return dataset[index]


# --- the number of workers changes nothing -------------------------------------------------------------------


def train_through(num_workers: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], str]:
    """Two epochs of SGD on a model with dropout, reading the loader live; returns the batches and the
    weights hash. With 0 workers the loader re-seeds the global generators in this very process between
    steps; seed_step makes the dropout masks independent of that."""
    loader = make_loader(Augmented(22), batch_size=4, seed=SEED, train=True, num_workers=num_workers)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches, step = [], 0
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for x, index in loader:
            batches.append((x.clone(), index.clone()))
            seed_step(SEED, step)
            loss = (model(x).squeeze(1) - index.float() / 10).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return batches, state_dict_sha256(model.state_dict())


def test_batches_and_trained_weights_are_the_same_with_0_and_2_workers() -> None:
    batches_0, weights_0 = train_through(0)
    batches_2, weights_2 = train_through(2)
    assert len(batches_0) == len(batches_2) == 2 * 6
    for (x0, i0), (x2, i2) in zip(batches_0, batches_2, strict=True):
        assert torch.equal(i0, i2) and torch.equal(x0, x2)
    assert weights_0 == weights_2
    # the samples did draw: one index gets other noise in another epoch
    first = {int(i): x for xs, batch in batches_0[:6] for x, i in zip(xs, batch, strict=True)}
    second = {int(i): x for xs, batch in batches_0[6:] for x, i in zip(xs, batch, strict=True)}
    assert not torch.equal(first[3], second[3])


def test_negative_control_a_plain_seeded_dataloader_draws_otherwise_with_workers() -> None:
    """PyTorch's documented recipe (a seeded generator) repeats only at one worker count."""

    def samples(num_workers: int) -> dict[int, torch.Tensor]:
        np.random.seed(0)
        loader = DataLoader(NumpyAugmented(16), batch_size=4, shuffle=True, num_workers=num_workers,
                            generator=torch.Generator().manual_seed(0))
        return {int(i): x for xs, batch in loader for x, i in zip(xs, batch, strict=True)}

    at_0, at_2 = samples(0), samples(2)
    assert sorted(at_0) == sorted(at_2) == list(range(16))
    assert any(not torch.equal(at_0[i], at_2[i]) for i in range(16))


def test_each_sample_draws_from_generators_seeded_by_seed_stream_epoch_and_index() -> None:
    dataset = Augmented(10)
    for train, stream in ((True, Stream.TRAIN_SAMPLE), (False, Stream.VAL_SAMPLE)):
        loader = make_loader(dataset, batch_size=3, seed=SEED, train=train)
        loader.sampler.set_epoch(4)
        got = [(int(i), x) for xs, batch in loader for x, i in zip(xs, batch, strict=True)]
        for index, x in got:
            expected, _ = keyed_sample(dataset, SEED, stream, 4, index)
            assert torch.equal(x, expected), (train, index)


# --- the order -----------------------------------------------------------------------------------------------


def test_an_epochs_order_is_randperm_of_the_derived_shuffle_seed() -> None:
    sampler = EpochSampler(23, seed=SEED, shuffle=True)
    for epoch in range(4):
        sampler.set_epoch(epoch)
        assert list(sampler) == [(epoch, index) for index in shuffle_oracle(23, SEED, epoch)]
    loader = make_loader(Augmented(23), batch_size=4, seed=SEED, train=True)
    loader.sampler.set_epoch(3)
    assert indices(loader) == shuffle_oracle(23, SEED, 3)


def test_every_epoch_is_a_permutation_and_differs_from_the_previous_one() -> None:
    sampler = EpochSampler(50, seed=SEED, shuffle=True)
    orders = []
    for epoch in range(6):
        sampler.set_epoch(epoch)
        orders.append([index for _, index in sampler])
    assert all(sorted(order) == list(range(50)) for order in orders)
    assert all(orders[epoch] != orders[epoch - 1] for epoch in range(1, 6))


def test_an_iterator_keeps_the_epoch_it_was_made_for_when_the_next_epoch_is_set_before_it_is_done() -> None:
    """A loader's workers still take keys of this epoch when the loop sets the next one (or an
    iterator is made ahead of its epoch): each key keeps its own epoch, so each sample draws from
    (seed, its epoch, index), as in the run that never prefetched."""
    sampler = EpochSampler(12, seed=SEED, shuffle=True)
    keys = iter(sampler)
    first = next(keys)
    sampler.set_epoch(1)
    assert [first, *keys] == [(0, index) for index in shuffle_oracle(12, SEED, 0)]
    assert list(sampler) == [(1, index) for index in shuffle_oracle(12, SEED, 1)]  # the next iterator: the next epoch


def test_validation_yields_every_index_once_in_order_without_padding() -> None:
    loader = make_loader(Augmented(23), batch_size=5, seed=SEED, train=False)
    loader.sampler.set_epoch(7)
    assert indices(loader) == list(range(23))
    assert [len(batch) for _, batch in loader] == [5, 5, 5, 5, 3]


# --- which generators a dataset draws from -------------------------------------------------------------------


def test_draws_from_torch_seeds_torch_alone() -> None:
    dataset = TorchOnly(6)
    loader = make_loader(dataset, batch_size=6, seed=SEED, train=False)
    random.seed(99)
    np.random.seed(99)
    before = random.getstate(), np.random.get_state()
    (xs, _), = list(loader)
    after = np.random.get_state()
    assert random.getstate() == before[0]
    assert np.array_equal(after[1], before[1][1]) and after[2] == before[1][2]
    for index in range(6):
        expected, _ = keyed_sample(dataset, SEED, Stream.VAL_SAMPLE, 0, index)
        assert torch.equal(xs[index], expected)


def test_declared_draws_looks_through_wrappers_and_defaults_to_all_three() -> None:
    assert declared_draws(Subset(TorchOnly(4), [0, 1])) == ("torch",)
    assert declared_draws(Augmented(4)) == ("random", "numpy", "torch")


def test_draws_from_as_a_string_is_refused_with_the_tuple_to_write() -> None:
    class Careless(TorchOnly):
        draws_from = ("torch")  # noqa: UP034 (the mistake under test: no comma)

    with pytest.raises(ValueError, match=r"\('torch',\)"):
        make_loader(Careless(4), batch_size=2, seed=SEED, train=True)


def test_draws_from_an_unknown_generator_is_refused_naming_it() -> None:
    class Unknown(TorchOnly):
        draws_from = ("torch", "cuda")

    with pytest.raises(ValueError, match="'cuda'"):
        make_loader(Unknown(4), batch_size=2, seed=SEED, train=True)


# --- failures ------------------------------------------------------------------------------------------------


class Broken(Augmented):
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index == 5:
            raise ZeroDivisionError("bad pixel")
        return super().__getitem__(index)


@pytest.mark.parametrize(("train", "words"), [(True, "sample 5 (epoch 3)"), (False, "validation sample 5")])
def test_an_exception_in_a_sample_becomes_a_sample_error_naming_it(train: bool, words: str) -> None:
    loader = make_loader(Broken(8), batch_size=8, seed=SEED, train=train)
    loader.sampler.set_epoch(2)  # shown counting from 1
    with pytest.raises(SampleError) as raised:
        list(loader)
    assert words in str(raised.value) and "ZeroDivisionError: bad pixel" in str(raised.value)
    assert isinstance(raised.value.__cause__, ZeroDivisionError)


# --- what creating a loader and an iterator touches ----------------------------------------------------------


def test_making_a_loader_and_its_iterators_draws_nothing_from_torchs_global_generator() -> None:
    before = torch.random.get_rng_state()
    loader = make_loader(Augmented(8), batch_size=2, seed=SEED, train=True)
    iter(loader), iter(loader)
    assert torch.equal(torch.random.get_rng_state(), before)
    iter(DataLoader(Augmented(8), batch_size=2, shuffle=True))  # control: a plain loader draws its seed there
    assert not torch.equal(torch.random.get_rng_state(), before)
