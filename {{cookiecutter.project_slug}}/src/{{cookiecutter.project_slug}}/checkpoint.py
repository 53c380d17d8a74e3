"""Checkpoints that survive a kill at any instant, and the atomic writes they are built on.

A checkpoint holds everything the next step depends on: the TrainingState below (model,
optimizer, learning-rate scheduler, fp16's GradScaler, the data position, the step, the number of metrics.csv rows
written so far), every rank's RNG states, the config, and a format version. Because the data
order is a function of (seed, epoch) and each sample's random draws of (seed, epoch, index), the
data position is enough to resume the data stream exactly, whatever the number of workers.

Every load uses `torch.load(..., weights_only=True)`: a checkpoint is a pickle, and a pickle can
run code when loaded. With weights_only, only tensors and plain containers load.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

FORMAT_VERSION = 2
KEEP_LAST = 3  # older checkpoints are deleted once a newer one is safely on disk
UMASK = os.umask(0)  # read the process's umask (the only way is to set it), then put it back
os.umask(UMASK)


def atomic_write(path: Path, write) -> None:
    """Writes through `write(file)` into a temporary file beside `path`, then renames it over `path`.

    The rename is atomic: a reader, or a kill at any instant, sees the old file or the complete
    new one, never a torn one. fsync before the rename makes the bytes durable first; fsync of the
    folder makes the rename itself durable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp makes it private (0600); give it a normal file's mode
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    if hasattr(os, "O_DIRECTORY"):  # not on Windows, where a folder cannot be opened this way
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda file: file.write(text.encode("utf-8")))


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
    """The newest checkpoint that loads, falling back past damaged ones with a warning each.

    Returns None when there is none intact.
    """
    for path in sorted(folder.glob("step-*.pt"), reverse=True):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if state.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format version {state.get('format_version')!r}, expected {FORMAT_VERSION}")
        except Exception as error:  # a truncated or corrupt file raises many kinds of error
            reason = (str(error).strip().splitlines() or [""])[0][:200]
            print(f"warning: skipping damaged checkpoint {path} ({type(error).__name__}: {reason})", file=sys.stderr)
            continue
        return state, path
    return None


@dataclass
class TrainingState:
    """What the training loop changes as it goes, and so what a checkpoint saves and a resume
    restores (besides the RNG states, which train.py restores last)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler  # fp16's loss scale; disabled (and stateless) otherwise
    epoch: int = 0  # the epoch in progress (or next, at an epoch's end)
    batch: int = 0  # batches of `epoch` already trained on
    step: int = 0  # optimizer steps since the start of the run
    metrics_rows: int = 0  # rows of metrics.csv written up to this point
    train_seconds: float = 0.0  # time spent training before this process started

    def to_checkpoint(self, rng_states: list[dict], config: dict, seconds: float) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "epoch": self.epoch, "batch": self.batch, "step": self.step, "metrics_rows": self.metrics_rows,
                "train_seconds": seconds, "rng": rng_states, "config": config}

    def load_checkpoint(self, checkpoint: dict) -> None:
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        if self.scaler.is_enabled():  # start.py refused a checkpoint without it
            self.scaler.load_state_dict(checkpoint["scaler"])
        self.epoch, self.batch, self.step = checkpoint["epoch"], checkpoint["batch"], checkpoint["step"]
        self.metrics_rows, self.train_seconds = checkpoint["metrics_rows"], checkpoint["train_seconds"]
