"""The task's promises (task.py's docstring), checked once on a few samples before a run starts.

A task that breaks one (a loss that is not one number, a NaN metric, a name that collides with a
column of metrics.csv, a model whose output does not fit the targets) is refused with one line
naming the function and what it returned, before the run folder holds anything.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping
from types import ModuleType

import torch
from torch import nn
from torch.utils.data import DataLoader

from .device import to_device
from .precision import autocast
from .run_folder import ROW_FIELDS

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
        if not isinstance(name, str) or not NAME.fullmatch(name) or name in ROW_FIELDS:
            raise TaskError(f"task.metrics_from_sums returned a figure named {name!r}: a name must be letters, "
                            f"digits and _, and not one of metrics.csv's own columns ({', '.join(ROW_FIELDS)})")
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
