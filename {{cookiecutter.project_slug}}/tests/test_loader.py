"""Specifications of utils/data.py, the seeded DataLoader factory: a loader's order is a function of
(seed, epoch), each sample's random draws a function of (seed, epoch, index), whatever the number
of workers and whatever the global generators held before."""

from __future__ import annotations

import random
import re
import traceback

import numpy as np
import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.train import first
from {{ cookiecutter.project_slug }}.utils.data import KeyedRandomness, SampleError, make_loader

from conftest import settings

SEED, SAMPLES, BATCH = 3, 128, 16


def train_set():
    return first(task.make_datasets(settings(seed=SEED))[0], SAMPLES)


def flat(batches) -> torch.Tensor:
    """Every input tensor of a list of (input, target) batches, as one flat float tensor."""
    return torch.cat([torch.as_tensor(batch[0]).reshape(-1).double() for batch in batches])


def epoch_batches(seed: int, num_workers: int, epoch: int = 0) -> list:
    """The batches a fresh training loader yields in one epoch."""
    loader = make_loader(train_set(), batch_size=BATCH, seed=seed, train=True, num_workers=num_workers)
    loader.sampler.set_epoch(epoch)
    return list(loader)


def where_they_part(first: list, second: list) -> str:
    """The first batch at which two epochs' inputs differ, in words ("" if they never do): a failing
    test says what differs, not `assert False`."""
    for number, (one, other) in enumerate(zip(first, second, strict=False)):  # the lengths: below
        if not torch.equal(flat([one]), flat([other])):
            return f"the two epochs part at batch {number} of {len(first)}"
    return "" if len(first) == len(second) else f"one epoch has {len(first)} batches, the other {len(second)}"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_seed_gives_the_same_order_and_augmented_values_from_two_fresh_loaders(num_workers):
    parted = where_they_part(epoch_batches(SEED, num_workers), epoch_batches(SEED, num_workers))
    assert not parted, f"two fresh loaders of seed {SEED} with {num_workers} workers: {parted}"


def test_the_worker_count_changes_no_augmented_value():
    parted = where_they_part(epoch_batches(SEED, 0), epoch_batches(SEED, 2))
    assert not parted, f"one seed, 0 workers against 2: {parted} (the order is the same, so an augmentation differs)"


def order_of(seed: int, epoch: int = 0) -> list[int]:
    """The order itself: the indices a training loader's sampler yields in `epoch`."""
    sampler = make_loader(train_set(), batch_size=BATCH, seed=seed, train=True).sampler
    sampler.set_epoch(epoch)
    return [index for _, index in sampler]


def test_another_seed_gives_another_order():
    """The order, not the augmented values (those differ by seed whatever the order)."""
    assert order_of(SEED) != order_of(SEED + 1)
    assert sorted(order_of(SEED + 1)) == sorted(order_of(SEED))  # each a permutation of the same samples


def test_each_epoch_has_its_own_order():
    """The order itself, not the augmented values (those differ by epoch whatever the order): each
    epoch a permutation of the samples, no two epochs the same one."""
    orders = [tuple(order_of(SEED, epoch)) for epoch in range(3)]
    assert all(sorted(order) == list(range(SAMPLES)) for order in orders)
    assert len(set(orders)) == len(orders)


def test_a_validation_loader_yields_every_sample_once_in_the_datasets_order_every_epoch():
    """What evaluation scores: the split itself, whatever the epoch (a shuffled one would add the
    same figures up in another order, and differ in the last bits)."""
    val_set = first(task.make_datasets(settings(seed=SEED))[1], SAMPLES)
    loader = make_loader(val_set, batch_size=BATCH, seed=SEED, train=False)
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        assert torch.equal(flat(list(loader)), flat([val_set[index] for index in range(len(val_set))])), epoch


class FailsOnSample:
    """Eight samples; fetching sample 5 raises, as a corrupt file of a user's data would."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5:
            raise ValueError("cannot read it")
        return torch.tensor(float(index))


@pytest.mark.parametrize("num_workers", [0, 2])  # a worker's failure reaches the training process with its words
def test_a_sample_that_fails_is_named_with_its_epoch_counted_from_one_as_the_run_prints_epochs(num_workers):
    """The message a run stops with names the sample and the epoch in the words the run's own lines
    use (epoch 1 is the first), and a validation sample as such (it has no epoch). From a worker,
    the error's text holds the worker's traceback, which ends with that line."""
    loader = make_loader(FailsOnSample(), batch_size=4, seed=SEED, train=True, num_workers=num_workers)
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        assert re.search(rf"(?m)(^| )sample 5 \(epoch {epoch + 1}\): ValueError: cannot read it$", epoch_error(loader))
    validation = make_loader(FailsOnSample(), batch_size=4, seed=SEED, train=False, num_workers=num_workers)
    assert re.search(r"(?m)(^| )validation sample 5: ValueError: cannot read it$", epoch_error(validation))


class FileGoneOnSample(FailsOnSample):
    """Sample 5's file deleted since the dataset listed it: an OSError, the commonest failure of real data."""

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5:
            raise FileNotFoundError(2, "No such file or directory", "images/5.png")
        return torch.tensor(float(index))


def test_a_sample_that_fails_with_any_error_is_named_not_only_with_the_errors_of_a_bad_index():
    """An OSError too, not only the IndexError, KeyError or ValueError of a dataset's own code."""
    loader = make_loader(FileGoneOnSample(), batch_size=4, seed=SEED, train=False, num_workers=0)
    assert re.search(r"(?m)(^| )validation sample 5: FileNotFoundError: .*'images/5.png'$", epoch_error(loader))


def epoch_error(loader) -> str:
    """What an epoch of `loader` stops with, its iterator freed at once. torch re-raises a worker's
    error in a reference cycle (the error, its traceback, the frame that raised it), which holds the
    epoch's iterator until the garbage collector takes them all, in any order: its queues went first,
    its workers never heard the end, and each took torch's 5 s to give up (10 to 20 s of this suite).
    Clearing the traceback's frames breaks the cycle, and the iterator stops its workers as usual.
    (A training process that stops on such an error exits, and torch waits for no worker then.)"""
    try:
        list(loader)
    except SampleError as error:
        traceback.clear_frames(error.__traceback__)
        return str(error)
    raise AssertionError("the epoch ended without the error")


def test_making_a_loader_and_its_iterator_draws_nothing_from_the_global_generators():
    """The loader takes its workers' seeds from a generator of its own: building one, or starting
    an epoch, moves none of the generators the training step draws from."""
    dataset = train_set()
    before = global_states()
    iter(make_loader(dataset, batch_size=BATCH, seed=SEED, train=True))
    after = global_states()
    assert after[:2] == before[:2] and torch.equal(after[2], before[2])


def global_states() -> tuple:
    return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state()


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


@pytest.mark.skipif(not hasattr(task, "random_shift_contrast_noise"),
                    reason="about the example's augmentation, which this project's task.py replaced")
def test_example_data_the_augmentation_shifts_by_up_to_one_pixel_every_way():
    """One bright pixel in the middle of a dark image, augmented 300 times: it lands on each of the
    nine places at most one pixel away, and nowhere else (contrast and noise keep it the brightest)."""
    image = torch.zeros(1, 8, 8)
    image[0, 4, 4] = 1.0
    for generator in (random.seed, np.random.seed, torch.manual_seed):
        generator(0)
    landed = set()
    for _ in range(300):
        row, column = divmod(int(task.random_shift_contrast_noise(image).argmax()), 8)
        landed.add((row - 4, column - 4))
    assert landed == {(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)}


class DrawsUndeclared(torch.utils.data.Dataset):
    """The task's first samples, each shifted by a draw from each global generator, and saying
    nothing of what it draws from, as most datasets say nothing: the loader seeds all three."""

    def __init__(self, dataset) -> None:
        self.samples = [dataset[index] for index in range(len(dataset))]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        inputs, target = self.samples[index]
        return torch.as_tensor(inputs) + torch.rand(()) + random.random() + float(np.random.rand()), target


class DrawsUnseeded(DrawsUndeclared):
    """The same, saying that it draws from none (`draws_from = ()`): the loader then seeds nothing
    before a sample."""

    draws_from = ()


def loader_epoch(dataset, workers: int) -> torch.Tensor:
    loader = make_loader(dataset, batch_size=BATCH, seed=SEED, train=True, num_workers=workers)
    return flat(list(loader))


def test_a_dataset_that_says_nothing_of_its_draws_gets_all_three_generators_seeded():
    """Most datasets declare no draws_from: the loader seeds Python's, NumPy's and torch's generators
    before each of their samples, so the worker count changes none of their values."""
    torch.manual_seed(0)
    undeclared = DrawsUndeclared(train_set())
    assert torch.equal(loader_epoch(undeclared, 0), loader_epoch(undeclared, 2))


class DrawsNothing(DrawsUndeclared):
    """The task's first samples as they are, saying that it draws from none."""

    draws_from = ()

    def __getitem__(self, index: int):
        return self.samples[index]


class AugmentedByAWrapper(torch.utils.data.Dataset):
    """A wrapper that keeps the dataset it wraps as `.dataset`, as Subset does, and adds an
    augmentation of its own, drawn from NumPy, saying so (`draws_from`)."""

    draws_from = ("numpy",)

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        inputs, target = self.dataset[index]
        return torch.as_tensor(inputs) + float(np.random.rand()), target


def test_a_wrapper_that_says_what_it_draws_is_seeded_for_it_over_a_dataset_that_draws_nothing():
    """The loader looks through wrappers that say nothing (Subset, --max-samples) for what a dataset
    draws, and stops at the first that says: this wrapper's NumPy draws are seeded before each
    sample, though the dataset it wraps draws nothing, so the worker count changes none of them."""
    augmented = AugmentedByAWrapper(DrawsNothing(train_set()))
    assert torch.equal(loader_epoch(augmented, 0), loader_epoch(augmented, 2))


@pytest.mark.parametrize("names", [("NumPy",), ("numpy ",), ("Torch", "random"), ("jax",)])
def test_a_draws_from_naming_a_generator_in_another_spelling_is_refused_when_the_loader_is_made(names):
    """Only 'random', 'numpy' and 'torch', spelled so: another spelling would match no generator, and
    the one it meant would go unseeded, drawing otherwise in each worker. Refused before any sample."""
    misnamed = type("Misnamed", (DrawsUndeclared,), {"draws_from": names})(train_set())
    with pytest.raises(ValueError, match="may name only 'random', 'numpy', 'torch'"):
        make_loader(misnamed, batch_size=BATCH, seed=SEED, train=True)


@pytest.mark.parametrize("names", ["torch", "numpy", ""])
def test_a_draws_from_written_as_a_string_is_refused_saying_the_tuple_needs_its_comma(names):
    """("torch") is the string "torch", the commonest slip: told to write ("torch",), not that it
    names 't', 'o', 'r', 'c', 'h'; and "" is not taken for "draws from nothing", which is ()."""
    as_a_string = type("AsAString", (DrawsUndeclared,), {"draws_from": names})(train_set())
    with pytest.raises(ValueError) as refused:
        make_loader(as_a_string, batch_size=BATCH, seed=SEED, train=True)
    assert str(refused.value) == f"draws_from is the string {names!r}; write a tuple of names, such as ({names!r},)"


def inputs_of(dataset) -> torch.Tensor:
    return torch.stack([torch.as_tensor(dataset[i][0]) for i in range(len(dataset))])


def test_another_seed_with_the_same_data_seed_is_scored_on_the_same_validation_samples():
    _, val_7 = task.make_datasets(settings(seed=7))
    _, val_8 = task.make_datasets(settings(seed=8))
    assert torch.equal(inputs_of(val_7), inputs_of(val_8))


@pytest.mark.skipif(not hasattr(task, "make_synthetic") or not hasattr(settings(), "data_seed"),
                    reason="about the example's data and its --data-seed, which this project replaced or took out")
def test_example_data_another_data_seed_picks_other_validation_samples():
    _, val_7 = task.make_datasets(settings(seed=7))
    _, val_other_data = task.make_datasets(settings(seed=7, data_seed=(settings().data_seed + 1) % 2**32))
    assert not torch.equal(inputs_of(val_7), inputs_of(val_other_data))


@pytest.mark.skipif(not hasattr(task, "load_arrays") or not hasattr(settings(), "data_seed"),
                    reason="about the example's data and its --data-seed, which this project replaced or took out")
def test_example_data_each_sample_is_in_one_split_alone():
    """The validation samples are held out: each of the data's samples is in the training split or
    in the validation split, never in both (scored on what it trained on) and never in neither."""
    config = settings()
    images, _ = task.load_arrays(task.DATASET, config.data_seed)
    train, val = task.make_datasets(config)
    split = [image.numpy().tobytes() for part in (train, val) for image in part.images]  # as stored: unaugmented
    assert sorted(split) == sorted(image.tobytes() for image in images), \
        f"{len(train)} training and {len(val)} validation samples, of {len(images)}"


@pytest.mark.skipif(not hasattr(task, "load_arrays") or not hasattr(task, "NUM_CLASSES")
                    or not hasattr(settings(), "data_seed"),
                    reason="about the example's data and its classes, which this project replaced or took out")
def test_example_data_each_split_holds_every_class():
    """The example's classes are 0 .. NUM_CLASSES - 1, and each split holds each of them: a class that
    never occurs leaves an output the loss never trains, and the notebook's chance level wrong."""
    config = settings()
    _, labels = task.load_arrays(task.DATASET, config.data_seed)
    assert sorted(set(labels.tolist())) == list(range(task.NUM_CLASSES))
    for split in task.make_datasets(config):
        assert sorted(set(torch.as_tensor(split.labels).tolist())) == list(range(task.NUM_CLASSES))


def test_negative_control_a_generator_the_loader_does_not_seed_changes_with_the_worker_count():
    """What the keyed seeding prevents: a draw that nobody seeds per sample comes from each
    worker's own stream, so two workers hand out other values than none. The tests above could
    not pass by luck."""
    torch.manual_seed(0)
    unseeded = DrawsUnseeded(train_set())
    assert not torch.equal(loader_epoch(unseeded, 0), loader_epoch(unseeded, 2))


@pytest.mark.skipif(not hasattr(task, "load_digits_arrays"), reason="about the example's digits")
def test_example_data_the_digits_are_exactly_scikit_learns():
    """Every bake holds the digits (DATASET = "digits" in task.py switches to them), read from
    scikit-learn's own file without importing it: sample for sample, scikit-learn's loader's."""
    datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn is not installed: the example's digits "
                                   "need it (a dependency of a project baked with dataset=digits)")
    images, labels = task.load_digits_arrays()
    digits = datasets.load_digits()
    assert images.shape == (1797, 1, 8, 8) and np.bincount(labels).tolist() == [
        178, 182, 177, 183, 181, 182, 181, 179, 174, 180]  # the digits of its file, by class
    assert np.array_equal(images[:, 0], (digits.images / 16.0).astype(np.float32))
    assert np.array_equal(labels, digits.target)
