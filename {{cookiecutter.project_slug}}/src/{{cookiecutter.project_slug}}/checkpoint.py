"""Checkpoints that survive a kill at any instant, and the atomic writes they are built on.

A checkpoint holds everything the next step depends on: model, optimizer, learning-rate
scheduler, every RNG state, the data position (epoch and batches done in it), the step, the
number of metrics.csv rows written so far, the config, and a format version. Because the data
order is a function of (seed, epoch) and each sample's augmentation of (seed, epoch, index), the
data position is enough to resume the data stream exactly, whatever the number of workers.

Every load uses `torch.load(..., weights_only=True)`: a checkpoint is a pickle, and a pickle can
run code when loaded. With weights_only, only tensors and plain containers load.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

FORMAT_VERSION = 1
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
