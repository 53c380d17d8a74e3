"""Choosing the device, restricting the visible GPUs, and moving batches there.

This file imports nothing of its project: copy it into any PyTorch project. Call
`restrict_visible_gpus` (if at all) before anything touches CUDA, then `select_device(spec)`, and
move the model once (`model.to(device)`) and each batch (`to_device(batch, device)`).

Myths this module corrects:
- A loss module (`nn.CrossEntropyLoss()`) holds no parameters, so it needs no `.to(device)`;
  it runs wherever its inputs are. Only modules with parameters or buffers need moving.
- `model.cuda("cuda:1,2")` is not multi-GPU training: it is an invalid device string. One process
  drives one GPU; several GPUs mean several processes, started by `torchrun` and wrapped in
  DistributedDataParallel.
- `os.environ["CUDA_VISIBLE_DEVICES"] = "1"` in the middle of a script does nothing once CUDA
  has initialised: the driver reads it once. `restrict_visible_gpus` refuses in that case.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch


def available_devices() -> list[str]:
    """The device strings this machine can honour now, for error messages and environment.json."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def device_name(spec: str) -> str:
    """'CPU', ' cuda:0 ' -> 'cpu', 'cuda:0': the one spelling of a device request, so that config.json
    and `compare` see one setting, not two. ValueError (one line) for what is no device name."""
    name = spec.strip().lower()
    if not re.fullmatch(r"auto|cpu|mps|cuda(:[0-9]+)?", name):
        hint = " (one process uses one GPU; for several, launch with torchrun)" if "," in name else ""
        raise ValueError(f"{spec!r} is not one of auto, cpu, cuda, cuda:N, mps{hint}")
    return name


def select_device(spec: str = "auto") -> torch.device:
    """The device a request names: auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps.

    Only asks what exists (CUDA stays uninitialised). Raises ValueError, listing what is
    available, for a request this machine cannot meet.
    """
    name = device_name(spec)
    available = f"available: {', '.join(available_devices())}"
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", 0)
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device 'mps' is not available here; {available}")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {spec!r} asks for CUDA, which is not available here; {available}")
        if torch.device(name).index is not None and torch.device(name).index >= torch.cuda.device_count():
            raise ValueError(f"device {spec!r} is out of range; {available}")
        return torch.device("cuda", torch.device(name).index or 0)
    return torch.device(name)


def restrict_visible_gpus(indices: Sequence[int]) -> None:
    """Makes only these GPUs visible to this process (they become cuda:0, cuda:1, ...).

    Works only before CUDA initialises, so call it first thing, before any torch.cuda call: even
    torch.cuda.is_available() can start the CUDA driver, which reads the variable then. Afterwards
    a changed CUDA_VISIBLE_DEVICES is silently ignored. torch tells us only whether its own CUDA
    state is initialised (torch.cuda.is_initialized), so that is the case we refuse.
    """
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "CUDA is already initialised, so CUDA_VISIBLE_DEVICES can no longer take effect. "
            "Call restrict_visible_gpus() before any tensor goes to the GPU, or export "
            "CUDA_VISIBLE_DEVICES before starting Python."
        )
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in indices):
        raise ValueError(f"GPU indices must be non-negative integers, not {list(indices)!r}")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in indices)


def to_device(batch: Any, device: torch.device) -> Any:
    """Moves every tensor in a nested batch (tensors, tuples, lists, dicts) to `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple keeps its type
        return type(batch)(*(to_device(value, device) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(value, device) for value in batch)
    return batch
