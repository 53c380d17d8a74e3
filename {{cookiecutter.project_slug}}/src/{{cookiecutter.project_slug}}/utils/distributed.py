"""torchrun: several processes, one per device. Only entered when WORLD_SIZE is above 1.

torchrun starts one process per device and tells each its RANK, LOCAL_RANK and WORLD_SIZE.
Each process trains a DistributedDataParallel copy of the model on its share of every batch;
gradients are averaged across processes after each backward pass.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .repro import capture_rng_state

TIMEOUT = timedelta(minutes=5)  # a rank that stops answering fails the others instead of hanging them


def context() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) as torchrun sets them; (0, 0, 1) for a plain `python -m`."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def start(device: torch.device) -> None:
    """Joins the process group: nccl between GPUs, gloo between CPU processes."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)


def stop() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def backend() -> str | None:
    return dist.get_backend() if dist.is_initialized() else None


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """The model to train: itself in one process, a DistributedDataParallel copy under torchrun
    (it also copies rank 0's initial weights to every rank)."""
    if not dist.is_initialized():
        return model
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank if it is true on any: ranks must stop at the same step, or the next
    gradient all-reduce waits for a rank that has left."""
    if not dist.is_initialized():
        return flag
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def sum_over_ranks(values: list[float], device: torch.device) -> list[float]:
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def mean_over_ranks(values: list[float], device: torch.device) -> list[float]:
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    return [value / world_size for value in sum_over_ranks(values, device)]


def rng_states_of_all_ranks() -> list[dict]:
    """Every rank's RNG state, gathered on rank 0 (a list on rank 0, [] elsewhere)."""
    if not dist.is_initialized():
        return [capture_rng_state()]
    states = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(capture_rng_state(), states, dst=0)
    return states or []
