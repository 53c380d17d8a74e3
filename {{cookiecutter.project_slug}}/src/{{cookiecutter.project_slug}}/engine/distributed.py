"""torchrun: several processes, one per device. Only entered when WORLD_SIZE is above 1.

torchrun starts one process per device and tells each its RANK, LOCAL_RANK and WORLD_SIZE.
Each process trains a DistributedDataParallel copy of the model on its share of every batch;
gradients are averaged across processes after each backward pass.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

TIMEOUT = timedelta(minutes=5)  # a rank that stops answering fails the others instead of hanging them
_host_group = None  # a gloo group for agreeing on host-side flags without waiting for the GPU


def context() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) as torchrun sets them; (0, 0, 1) for a plain `python -m`."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def join(device: torch.device) -> None:
    """Joins the process group: nccl between GPUs, gloo between CPU processes."""
    global _host_group
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)
    _host_group = dist.new_group(backend="gloo") if device.type == "cuda" else dist.group.WORLD


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def backend() -> str | None:
    return dist.get_backend() if dist.is_initialized() else None


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """The model to train: itself in one process, a DistributedDataParallel copy under torchrun
    (it also copies rank 0's initial weights to every rank)."""
    if not dist.is_initialized():
        return model
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def no_sync(model: nn.Module, last_micro_batch: bool) -> AbstractContextManager:
    """Within an accumulation window, DDP's gradient all-reduce is needed after the last
    micro-batch's backward pass only: the others add up locally."""
    if isinstance(model, DistributedDataParallel) and not last_micro_batch:
        return model.no_sync()
    return nullcontext()


def any_rank(flag: bool) -> bool:
    """True on every rank if it is true on any: ranks must stop at the same step, or the next
    gradient all-reduce waits for a rank that has left. Agreed through the CPU, so the host never
    waits for the GPU."""
    if not dist.is_initialized():
        return flag
    value = torch.tensor([int(flag)])
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=_host_group)
    return bool(value.item())


def sum_over_ranks(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each tensor summed over every rank (in place; a no-op in one process)."""
    if dist.is_initialized():
        for tensor in tensors.values():
            dist.all_reduce(tensor)
    return tensors
