"""The task's promises (task.py's docstring), checked once on a few samples before a run starts.

A task that breaks one (a loss that is not one number, a NaN metric, a name that collides with a
column of metrics.csv, a model whose output does not fit the targets, a dataset that draws from a
generator its `draws_from` leaves out) is refused with one line naming the function and what it
returned, before the run folder holds anything.
"""

from __future__ import annotations

import math
import random
import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..utils.data import declared_draws
from ..utils.device import to_device
from ..utils.repro import GLOBAL_GENERATORS, seed_global_generators
from .precision import autocast
from .run_folder import RESERVED_NAMES

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CHECKED_SAMPLES = 4


class TaskError(Exception):
    """The task broke a promise; the message is one line."""


def check_task(task: ModuleType, model: nn.Module, val_loader: DataLoader, device: torch.device,
               precision: str) -> tuple[str, ...]:
    """Runs the model and the task's functions on the first few validation samples and checks what
    they return; the figure names ('loss' first). Evaluation mode, so nothing is drawn at random
    and no BatchNorm statistic moves; gradients on, so that the loss is seen to depend on the model."""
    keys = [(0, index) for index in range(min(CHECKED_SAMPLES, len(val_loader.dataset)))]
    if not keys:
        raise TaskError("task.make_datasets returned an empty validation set")
    inputs, targets = to_device(val_loader.collate_fn(val_loader.dataset.__getitems__(keys)), device)
    was_training = model.training
    model.eval()
    try:
        with warnings.catch_warnings(record=True) as caught, torch.enable_grad(), autocast(precision, device):
            warnings.simplefilter("always")
            outputs = call("the model's forward (task.make_model)", model, inputs)
            sums = call("task.batch_sums", task.batch_sums, outputs, targets)
            check_sums(sums)
            figures = call("task.metrics_from_sums", task.metrics_from_sums, sums)
    finally:
        model.train(was_training)
    broadcast = [str(w.message) for w in caught if "broadcast" in str(w.message)]
    if broadcast:
        raise TaskError(f"task.batch_sums: the model's outputs do not fit the targets: {broadcast[0]}")
    names = check_figures(figures, any(p.requires_grad for p in model.parameters()))
    headline = getattr(task, "HEADLINE_METRIC", None)
    if headline not in names:
        raise TaskError(f"task.HEADLINE_METRIC is {headline!r}, which is not one of the figures that "
                        f"task.metrics_from_sums returns ({', '.join(names)})")
    return names


def call(what: str, function, *args):
    try:
        return function(*args)
    except Exception as error:  # the user's code: any error, as one line
        message = (str(error).strip().splitlines() or [""])[0][:300]
        raise TaskError(f"{what} raised {type(error).__name__} on the first validation samples: {message}") from error


def check_sums(sums: object) -> None:
    if not isinstance(sums, Mapping) or not sums:
        raise TaskError(f"task.batch_sums returned {type(sums).__name__}, not a dict of sums by name")
    for name, value in sums.items():
        if not isinstance(name, str) or not isinstance(value, (torch.Tensor, int, float)):
            raise TaskError(f"task.batch_sums returned {name!r}: {type(value).__name__}; each sum must be a "
                            "tensor or a number, under a name")


def check_figures(figures: object, model_learns: bool) -> tuple[str, ...]:
    if not isinstance(figures, Mapping) or "loss" not in figures:
        raise TaskError(f"task.metrics_from_sums returned {shown(figures)}; it must return a dict with 'loss' "
                        "(what training minimises) and any other figures")
    for name, value in figures.items():
        if not isinstance(name, str) or not NAME.fullmatch(name) or name in RESERVED_NAMES:
            raise TaskError(f"task.metrics_from_sums returned a figure named {name!r}: a name must be letters, "
                            f"digits and _, and not one of metrics.csv's own columns or the trackers' name for lr "
                            f"({', '.join(RESERVED_NAMES)})")
        if not isinstance(value, (torch.Tensor, int, float)) or (isinstance(value, torch.Tensor)
                                                                 and value.numel() != 1):
            raise TaskError(f"task.metrics_from_sums returned {name} = {shown(value)}: each figure must be one "
                            "number (sum or average it over the batch)")
        number = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        if not math.isfinite(number):
            raise TaskError(f"task.metrics_from_sums returned {name} = {number} on the first validation "
                            "samples: a figure must be a finite number (a count of zero?)")
    loss = figures["loss"]
    if model_learns and not (isinstance(loss, torch.Tensor) and loss.requires_grad):
        raise TaskError("task.metrics_from_sums returned a 'loss' that does not depend on the model's parameters: "
                        "compute it from the outputs with torch operations (no .item(), no NumPy)")
    return ("loss", *(name for name in figures if name != "loss"))


def shown(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {str(value)[:60]}"


def check_declared_draws(train_set: Dataset, val_set: Dataset) -> None:
    """A dataset's `draws_from` (utils/data.py) names the only generators seeded before each of
    its samples. One that it leaves out is tried on the first few samples: seeded otherwise, does a
    sample change? Then the dataset draws from it, and would draw differently in each worker.
    A dataset that draws from a generator for some samples only can slip past this check: declare
    every generator that any sample may draw from. First, whatever it declares: a dataset whose
    samples change when read twice with the same seeds keeps a generator of its own, which no
    declaration fixes. The generators are left as they were found."""
    for split, dataset in (("training", train_set), ("validation", val_set)):
        try:
            draws = declared_draws(dataset)
        except ValueError as error:
            raise TaskError(f"task.make_datasets: the {split} set's {error}") from error
        if changes_by_itself(dataset):
            raise TaskError(f"task.make_datasets: the {split} set's samples differ from one read to the next with "
                            "the global generators seeded alike: it draws from a generator of its own (one made in "
                            "__init__ or at import, such as np.random.default_rng() or random.Random()), whose state "
                            "depends on the worker and on what it read before, and which no draws_from can fix: make "
                            "it per sample, and take its seed from torch.randint(2**62, ()) inside __getitem__ (the "
                            "README's rules of a dataset)")
        for generator in GLOBAL_GENERATORS:
            if generator not in draws and samples_change_with(dataset, generator):
                raise TaskError(f"task.make_datasets: the {split} set declares draws_from = {draws!r}, but its "
                                f"samples change with the {generator!r} generator: add {generator!r} to draws_from "
                                "(or remove draws_from: all three generators are then seeded)")


def changes_by_itself(dataset: Dataset) -> bool:
    """Whether one of the first samples differs when read twice with the same seeds: the dataset
    keeps some randomness (or state) of its own."""
    with generators_left_as_found():
        for index in range(min(CHECKED_SAMPLES, len(dataset))):
            seed_global_generators(1)
            reference = dataset[index]
            seed_global_generators(1)
            if not same(dataset[index], reference):
                return True
    return False


def samples_change_with(dataset: Dataset, generator: str) -> bool:
    """Whether one of the first samples changes when `generator` alone is seeded otherwise."""
    with generators_left_as_found():
        for index in range(min(CHECKED_SAMPLES, len(dataset))):
            seed_global_generators(1)
            reference = dataset[index]
            seed_global_generators(1)
            seed_global_generators(2, generators=(generator,))
            if not same(dataset[index], reference):
                return True
    return False


@contextmanager
def generators_left_as_found() -> Iterator[None]:
    """Puts the three global generators back as they were: a check must not shift the run's draws."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


def same(a: object, b: object) -> bool:
    """Bit-for-bit equality of two samples: tensors, arrays and numbers, in tuples, lists and dicts.
    An object that defines no equality of its own is taken as unchanged: the check cannot see in."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(bytes_of(a), bytes_of(b)))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (tuple, list)):
        return isinstance(b, type(a)) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, (float, np.generic)) or isinstance(b, (float, np.generic)):
        # Bit for bit too: a NaN (a missing label, say) is the same as itself, 0.0 not as -0.0
        return type(a) is type(b) and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    return type(a).__eq__ is object.__eq__ or bool(a == b)


def bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
