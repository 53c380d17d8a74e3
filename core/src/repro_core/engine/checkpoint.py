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

Two formats. With --parallel ddp (and in one process) a checkpoint is one file, step-N.pt,
written by rank 0: every rank holds the same weights. With --parallel fsdp no rank holds them
all, so a checkpoint is a folder, step-N/, written with torch.distributed.checkpoint (DCP): each
rank writes its own shards (__RANK_0.distcp), DCP's .metadata says where each piece of each
tensor is, and state.pt holds the rest of the state. DCP can read the shards back into any
number of ranks, which is what a resume on another world size needs. The folder is written under
a hidden name and renamed when complete, so step-N/ is whole or absent, like a step-N.pt file.
Only tensors go through DCP (it reads other values with a plain pickle load), and its .metadata,
a pickle too, is opened with an unpickler that accepts DCP's own record types and nothing else.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import distributed
from .files import atomic_write, fsync_dir

FORMAT_VERSION = 3
KEEP_LAST = 3  # older checkpoints are deleted once a newer one is safely on disk
ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive
SHARDED_STATE = "state.pt"  # in a sharded checkpoint's folder: all but the model's and optimizer's tensors
# What DCP's .metadata may hold: its own record types, tensor sizes and dtypes, paths.
METADATA_MODULES = ("torch.distributed.checkpoint.metadata",)
METADATA_NAMES = {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
                  ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"),
                  ("pathlib", "PurePosixPath"), ("pathlib", "PureWindowsPath")}


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step-{step:08d}.pt"


def save_checkpoint(folder: Path, state: dict) -> Path:
    """Saves `state` (which must hold 'step') atomically, then keeps only the newest KEEP_LAST."""
    path = checkpoint_path(folder, state["step"])
    atomic_write(path, lambda file: torch.save({"format_version": FORMAT_VERSION, **state}, file))
    for old in sorted(folder.glob("step-*.pt"))[:-KEEP_LAST]:
        old.unlink(missing_ok=True)
    return path


def load_latest_checkpoint(folder: Path, sharded: bool = False) -> tuple[dict, Path] | None:
    """The newest checkpoint that loads, skipping damaged or unsafe ones with a one-line warning
    each (the caller says which one it resumes from). None when none is intact. `sharded`: the
    folders that --parallel fsdp writes; only their state.pt is loaded here, the shards are
    checked to be all there."""
    intact = intact_checkpoints(folder, sharded, warn=True, first_only=True)
    return intact[0] if intact else None


def checkpoint_paths(folder: Path, sharded: bool = False) -> list[Path]:
    """Every checkpoint of the format, newest first, whole or not."""
    paths = [path for path in folder.glob("step-*") if path.is_dir()] if sharded else folder.glob("step-*.pt")
    return sorted(paths, reverse=True)


def intact_checkpoints(folder: Path, sharded: bool = False, warn: bool = True,
                       first_only: bool = False) -> list[tuple[dict, Path]]:
    """The checkpoints that load, newest first (only the newest with `first_only`), each damaged
    or unsafe one skipped with a one-line warning."""
    intact = []
    for path in checkpoint_paths(folder, sharded):
        state, problem = read_sharded_checkpoint(path) if sharded else read_checkpoint(path)
        if problem is None:
            intact.append((state, path))
            if first_only:
                break
        elif warn and distributed.context()[0] == 0:
            print(f"warning: skipping damaged checkpoint {path} ({problem})", file=sys.stderr)
    return intact


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


def read_model_weights(path: Path) -> tuple[dict[str, torch.Tensor], int | None]:
    """(a model's state_dict, the step it was saved at or None) from a model.pt, a best.pt or a
    checkpoint file; loaded with weights_only=True, so a file that holds code is refused, not run.
    ValueError, in one line, for a file that holds no model's weights."""
    if path.is_dir():
        raise ValueError(f"{path} is a folder (a sharded checkpoint of --parallel fsdp?): give the run's model.pt, "
                         "which holds the whole model")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # missing, a truncated archive, another format, an object that would run code
        _, problem = read_checkpoint(path)  # says which, in a few words
        raise ValueError(f"{path} cannot be loaded: {problem or 'not a model.pt or a checkpoint'}") from None
    if isinstance(loaded, dict) and "format_version" in loaded:  # a checkpoint: its model's part
        checkpoint, problem = read_checkpoint(path)
        if checkpoint is None:
            raise ValueError(f"{path} cannot be loaded: {problem}")
        return checkpoint["model"], checkpoint["step"]
    if not (isinstance(loaded, dict) and loaded and all(isinstance(value, torch.Tensor) for value in loaded.values())):
        raise ValueError(f"{path} holds no state_dict (a mapping of names to tensors)")
    return loaded, None


def sharded_checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step-{step:08d}"


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's .metadata, refusing any global but those it is made of (METADATA_NAMES):
    a pickle that names another one could run code as it loads."""

    def find_class(self, module: str, name: str):
        if (module, name) in METADATA_NAMES or (
                module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        if module in METADATA_MODULES:
            # Only the classes the module defines. Not any name of it: it imports os and dataclasses,
            # and pickle (protocol 4) looks a dotted name such as "os.system" up attribute by attribute.
            found = super().find_class(module, name)
            if isinstance(found, type) and found.__module__ == module:
                return found
        raise pickle.UnpicklingError(f"GLOBAL {module}.{name} is not allowed")


def read_sharded_checkpoint(path: Path) -> tuple[dict | None, str | None]:
    """(state.pt of the checkpoint folder `path`, None), or (None, what is wrong, in a few words):
    state.pt damaged, DCP's .metadata unsafe or damaged, or a shard file missing or short."""
    state, problem = read_checkpoint(path / SHARDED_STATE)
    if problem is not None:
        return None, f"{SHARDED_STATE}: {problem}"
    try:
        with open(path / ".metadata", "rb") as file:
            metadata = MetadataUnpickler(file).load()
        ends = {}  # each shard file's size, at least
        for piece in metadata.storage_data.values():
            ends[piece.relative_path] = max(ends.get(piece.relative_path, 0), piece.offset + piece.length)
    except FileNotFoundError:
        return None, "its .metadata is missing"
    except pickle.UnpicklingError as error:
        if "GLOBAL" in str(error):
            return None, "its .metadata holds objects other than DCP's records, which could run code when loaded"
        return None, "its .metadata is damaged"
    except Exception:  # a truncated or foreign pickle fails in many ways
        return None, "its .metadata is damaged"
    for name, end in sorted(ends.items()):
        shard = path / name
        if not shard.is_file():
            return None, f"shard {name} is missing"
        if shard.stat().st_size < end:
            return None, f"shard {name} is truncated"
    return {**state, "sharded": True}, None


def save_sharded_checkpoint(folder: Path, state: TrainingState, config: dict, seconds: float) -> Path:
    """--parallel fsdp: every rank calls it. Each rank writes its shards of the model and the
    optimizer state with DCP into a hidden folder; rank 0 then adds state.pt, renames the folder
    to step-N and keeps only the newest KEEP_LAST. Returns on every rank once that is done."""
    import torch.distributed.checkpoint as dcp

    path = sharded_checkpoint_path(folder, state.step)
    partial = folder / f".{path.name}.partial"
    main = distributed.rank() == 0
    if main:
        remove_folder(partial)  # left by a kill during an earlier save
        partial.mkdir(parents=True)
    distributed.barrier()
    distributed.broadcast_buffers(state.model)  # DCP writes one copy of what all ranks hold: rank 0's
    tensors, others = distributed.sharded_state(state.model, state.optimizer)
    dcp.save(tensors, storage_writer=dcp.FileSystemWriter(partial))  # each shard file is fsynced
    if main:
        rest = {"format_version": FORMAT_VERSION, **others, **state.position(config, seconds)}
        atomic_write(partial / SHARDED_STATE, lambda file: torch.save(rest, file))
        replace_folder(partial, path)
        old = sorted(p for p in folder.glob("step-*") if p.is_dir())[:-KEEP_LAST]
        for stale in old:
            remove_folder(stale)
    distributed.barrier()
    return path


def load_sharded_checkpoint(state: TrainingState, path: Path, checkpoint: dict) -> None:
    """Reads this rank's shards of checkpoint folder `path` into the (sharded) model and optimizer,
    whatever the number of ranks that wrote them; `checkpoint` is its state.pt."""
    import torch.distributed.checkpoint as dcp

    tensors, _ = distributed.sharded_state(state.model, state.optimizer)  # what to read: this rank's shards
    dcp.load(tensors, storage_reader=dcp.FileSystemReader(path))
    distributed.load_sharded_state(state.model, state.optimizer, tensors, checkpoint)


def replace_folder(partial: Path, path: Path) -> None:
    """Renames the complete folder `partial` to `path` (a rename is atomic), replacing a folder of
    that name if there is one (a second checkpoint at the same step)."""
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        remove_folder(old)
        os.replace(path, old)
    os.replace(partial, path)
    fsync_dir(path.parent)
    remove_folder(old)


def remove_folder(path: Path) -> None:
    """Deletes a checkpoint folder: first renamed out of sight, so that a kill while deleting
    leaves no half-deleted step-N that a resume would look at."""
    if not path.exists():
        return
    hidden = path if path.name.startswith(".") else path.with_name(f".{path.name}.deleting")
    if hidden != path:
        os.replace(path, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


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
                **self.position(config, seconds)}

    def position(self, config: dict, seconds: float) -> dict:
        """All of the state but the model and the optimizer."""
        return {"scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "epoch": self.epoch, "epoch_step": self.epoch_step, "step": self.step,
                "metrics_rows": self.metrics_rows, "train_seconds": seconds, "config": config}

    def load_checkpoint(self, checkpoint: dict, path: Path | None = None) -> None:
        """Restores the state from a checkpoint (`path`: its folder, for a sharded one)."""
        if checkpoint.get("sharded"):
            load_sharded_checkpoint(self, path, checkpoint)
        else:
            self.model.load_state_dict(checkpoint["model"])
            self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        if self.scaler.is_enabled():  # plan.py refused a checkpoint without it
            self.scaler.load_state_dict(checkpoint["scaler"])
        self.epoch, self.epoch_step, self.step = checkpoint["epoch"], checkpoint["epoch_step"], checkpoint["step"]
        self.metrics_rows, self.train_seconds = checkpoint["metrics_rows"], checkpoint["train_seconds"]
