"""Checkpoints: what one holds, how it is written, and how the newest intact one is found.

A checkpoint holds everything the next step depends on: the TrainingState below (model,
optimizer, learning-rate scheduler, fp16's GradScaler, the position in the data, the step, the
number of metrics.csv rows written so far), the config, and a format version. No random
generator state: each step's draws are a function of (seed, step, micro-batch, rank), and each
sample's of (seed, epoch, index), so the position in the data is enough to resume them exactly,
whatever the number of workers.

Every load uses `torch.load(..., weights_only=True)`: a checkpoint is a pickle, and a pickle can
run code when loaded. With weights_only, only tensors and plain containers load; a file that holds
anything else is refused, and never loaded another way.
"""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .files import atomic_write

FORMAT_VERSION = 3
KEEP_LAST = 3  # older checkpoints are deleted once a newer one is safely on disk
ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step-{step:08d}.pt"


def save_checkpoint(folder: Path, state: dict) -> Path:
    """Saves `state` (which must hold 'step') atomically, then keeps only the newest KEEP_LAST."""
    path = checkpoint_path(folder, state["step"])
    atomic_write(path, lambda file: torch.save({"format_version": FORMAT_VERSION, **state}, file))
    for old in sorted(folder.glob("step-*.pt"))[:-KEEP_LAST]:
        old.unlink(missing_ok=True)
    return path


def load_latest_checkpoint(folder: Path) -> tuple[dict, Path] | None:
    """The newest checkpoint that loads, skipping damaged or unsafe ones with a one-line warning
    each (the caller says which one it resumes from). None when none is intact."""
    for path in sorted(folder.glob("step-*.pt"), reverse=True):
        state, problem = read_checkpoint(path)
        if problem is None:
            return state, path
        print(f"warning: skipping damaged checkpoint {path} ({problem})", file=sys.stderr)
    return None


def read_checkpoint(path: Path) -> tuple[dict | None, str | None]:
    """(the checkpoint, None), or (None, what is wrong with the file, in a few words)."""
    try:
        with open(path, "rb") as file:
            if file.read(4) != ZIP_MAGIC:
                return None, "not a checkpoint file"
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "GLOBAL" in str(error):  # weights_only refused an object that unpickling would build by running code
            return None, "it holds objects other than tensors and plain values, which could run code when " \
                         "loaded; it was not loaded"
        return None, "not a checkpoint file"
    except OSError as error:
        return None, f"cannot be read: {error.strerror or error}"
    except Exception:  # torch reports a truncated or corrupt archive with several kinds of error
        return None, "truncated or damaged"
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        version = state.get("format_version") if isinstance(state, dict) else None
        return None, f"format version {version!r}, this code reads version {FORMAT_VERSION}"
    return state, None


@dataclass
class TrainingState:
    """What the training loop changes as it goes, and so what a checkpoint saves and a resume restores."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler  # fp16's loss scale; disabled (and stateless) otherwise
    epoch: int = 0  # the epoch in progress (or next, at an epoch's end)
    epoch_step: int = 0  # optimizer steps of `epoch` already taken
    step: int = 0  # optimizer steps since the start of the run
    metrics_rows: int = 0  # rows of metrics.csv written up to this point
    train_seconds: float = 0.0  # time spent training before this process started

    def to_checkpoint(self, config: dict, seconds: float) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "epoch": self.epoch, "epoch_step": self.epoch_step, "step": self.step,
                "metrics_rows": self.metrics_rows, "train_seconds": seconds, "config": config}

    def load_checkpoint(self, checkpoint: dict) -> None:
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        if self.scaler.is_enabled():  # plan.py refused a checkpoint without it
            self.scaler.load_state_dict(checkpoint["scaler"])
        self.epoch, self.epoch_step, self.step = checkpoint["epoch"], checkpoint["epoch_step"], checkpoint["step"]
        self.metrics_rows, self.train_seconds = checkpoint["metrics_rows"], checkpoint["train_seconds"]
