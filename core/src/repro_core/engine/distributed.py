"""torchrun: several processes, one per device. Entered when WORLD_SIZE is above 1, or for --parallel fsdp.

torchrun starts one process per device and tells each its RANK, LOCAL_RANK and WORLD_SIZE. How
they share the model is --parallel:

- ddp (the default): each process holds the whole model, trains a DistributedDataParallel copy
  of it on its share of every batch, and gradients are averaged across processes after each
  backward pass. Memory per process: all the weights, gradients and optimizer state.
- fsdp: PyTorch's FSDP2 (`fully_shard`), the engine of torchtitan and torchtune. Each process
  holds 1/world of every weight, gradient and optimizer state; a block's weights are gathered
  just before its forward (and backward) pass and freed after, gradients are reduce-scattered
  back into shards. For a model that does not fit one device; each step moves more data.

Buffers (BatchNorm's running statistics) are not sharded: each rank updates its own copy. Rank
0's are copied to every rank before evaluation and before a checkpoint, so that what is evaluated
and saved is rank 0's, as under DDP (which also copies them before each training forward pass:
that matters only to a model whose training forward reads its own buffers).
"""

from __future__ import annotations

import gc
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .precision import DTYPES

TIMEOUT = timedelta(minutes=5)  # a rank that stops answering fails the others instead of hanging them
_host_group = None  # a gloo group for agreeing on host-side flags without waiting for the GPU


def context() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) as torchrun sets them; (0, 0, 1) for a plain `python -m`."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def under_torchrun() -> bool:
    """Whether torchrun (or another launcher that sets what it sets) started this process."""
    return all(name in os.environ for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def join(device: torch.device) -> None:
    """Joins the process group: nccl between GPUs, gloo between CPU processes."""
    global _host_group
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)
    _host_group = dist.new_group(backend="gloo") if device.type == "cuda" else dist.group.WORLD


def leave() -> None:
    """Destroys the process groups while the interpreter is whole. A sharded model holds its device
    mesh, and the mesh its group, in reference cycles that only the garbage collector frees: left
    to Python's exit, gloo's worker threads may still run as the interpreter is torn down, which
    can abort the process (SIGABRT, "terminate called without an active exception"; seen twice on
    a loaded machine, in several hundred runs)."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def backend() -> str | None:
    return dist.get_backend() if dist.is_initialized() else None


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier(group=_host_group)


def wrap(model: nn.Module, device: torch.device, parallel: str = "ddp", blocks: list[nn.Module] | None = None,
         precision: str = "fp32") -> nn.Module:
    """The model to train: itself in one process; under torchrun a DistributedDataParallel copy
    (it also copies rank 0's initial weights to every rank), or for --parallel fsdp the model
    itself, sharded in place (see shard)."""
    if not dist.is_initialized():
        return model
    if parallel == "fsdp":
        return shard(model, shard_units(model) if blocks is None else blocks, precision)
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The blocks FSDP shards one by one, for any model: each child of the model that holds
    parameters, looking through nn.ModuleList and nn.ModuleDict (containers without a forward of
    their own, where a transformer keeps its layers) to their children. A block whose parameters
    are shared with modules outside it (tied embeddings) is left to the root, which holds every
    parameter no block holds. Only one block's full weights need to be in memory at a time;
    more blocks mean smaller gathers, and more of them. task.py may choose its own with a
    function `fsdp_blocks(model) -> list of modules`."""
    uses = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    units = []

    def visit(module: nn.Module) -> None:
        for child in module.children():
            if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
                visit(child)
                continue
            inside = Counter(id(p) for _, p in child.named_parameters(remove_duplicate=False))
            if inside and all(uses[key] == count for key, count in inside.items()):
                units.append(child)

    visit(model)
    return units


def shard(model: nn.Module, blocks: list[nn.Module], precision: str) -> nn.Module:
    """FSDP2: each block, then the root, becomes an FSDP module over all ranks (fully_shard
    changes the model in place: its parameters become DTensors, 1/world of each on each rank).
    Mixed precision is FSDP's own policy: with bf16 the gathered weights are cast to bfloat16 for
    the forward and backward passes, the gradients reduced in float32, and the sharded weights and
    the optimizer stay float32. Created before the optimizer, which must hold the shards."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=DTYPES.get(precision), reduce_dtype=torch.float32)
    # FSDP casts parameters, not buffers: a module with floating-point buffers (BatchNorm and its
    # running statistics) would get bfloat16 weights beside float32 statistics, which it refuses.
    # Such modules keep float32 weights, in units of their own, as they do under autocast alone.
    for module in [m for m in model.modules() if policy.param_dtype and m is not model and holds_float_buffers(m)]:
        fully_shard(module, mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.float32))
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def holds_float_buffers(module: nn.Module) -> bool:
    """Whether `module` itself holds parameters and floating-point buffers."""
    return any(True for _ in module.parameters(recurse=False)) and any(
        buffer.is_floating_point() for buffer in module.buffers(recurse=False))


def is_sharded(model: nn.Module) -> bool:
    if not dist.is_initialized():
        return False
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def reshard(model: nn.Module) -> None:
    """Under FSDP, puts every unit's parameters back into their shards. FSDP2 keeps the root unit's
    parameters gathered after its forward pass, for the backward pass it expects; after an
    evaluation there is none, and the model's parameters would no longer be the shards that the
    optimizer steps and a checkpoint saves (a KeyError in the optimizer's state_dict, with tied
    embeddings or any parameter left to the root). Nothing to do without FSDP."""
    if not is_sharded(model):
        return
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def broadcast_buffers(model: nn.Module) -> None:
    """Rank 0's buffers (BatchNorm's running statistics, say) on every rank."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)


def no_sync(model: nn.Module, last_micro_batch: bool) -> AbstractContextManager:
    """Within an accumulation window, DDP's gradient all-reduce is needed after the last
    micro-batch's backward pass only: the others add up locally. FSDP reduce-scatters after every
    micro-batch instead: it keeps the gradients sharded, which is what it is for."""
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


def max_over_ranks(number: int) -> int:
    if not dist.is_initialized():
        return number
    value = torch.tensor([number])
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=_host_group)
    return int(value.item())


def sum_over_ranks(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each tensor summed over every rank (in place; a no-op in one process)."""
    if dist.is_initialized():
        for tensor in tensors.values():
            dist.all_reduce(tensor)
    return tensors


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state_dict, with the same names and values whatever the parallelism.
    Sharded: every rank must call it (the shards are gathered); rank 0 gets it, on the CPU, the
    others an empty dict."""
    if not is_sharded(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def sharded_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(this rank's shards of the model and the optimizer state, as tensors by parameter name, for
    torch.distributed.checkpoint to write or read into; the optimizer's values that are not
    tensors: its hyper-parameters, per parameter group)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    optimizer_state = get_optimizer_state_dict(model, optimizer)
    tensors = {name: {key: value for key, value in values.items() if isinstance(value, torch.Tensor)}
               for name, values in optimizer_state["state"].items()}
    others = {name: {key: value for key, value in values.items() if not isinstance(value, torch.Tensor)}
              for name, values in optimizer_state["state"].items()}
    return ({"model": get_model_state_dict(model), "optimizer": tensors},
            {"optimizer_groups": optimizer_state["param_groups"], "optimizer_values": others})


def load_sharded_state(model: nn.Module, optimizer: torch.optim.Optimizer, tensors: dict, others: dict) -> None:
    """Puts what sharded_state gave (read back from a checkpoint) into the model and the optimizer."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    set_model_state_dict(model, tensors["model"])
    names = tensors["optimizer"].keys() | others["optimizer_values"].keys()
    state = {name: {**tensors["optimizer"].get(name, {}), **others["optimizer_values"].get(name, {})}
             for name in names}
    set_optimizer_state_dict(model, optimizer, {"state": state, "param_groups": others["optimizer_groups"]})


def evaluation_batches(loader, lockstep: bool) -> Iterator[tuple[object, bool]]:
    """(batch, counted) for each of this rank's evaluation batches. In lockstep (FSDP: every
    forward pass gathers weights from every rank, so all must make as many), a rank whose share
    of the split ended first makes forward passes on a spare batch, not counted, until the rank
    with the most batches is done. A rank with no sample at all borrows the split's first one."""
    batches = max_over_ranks(len(loader)) if lockstep else len(loader)
    spare = None
    for batch in loader:
        spare = batch if spare is None else spare
        yield batch, True
    if spare is None:
        spare = loader.collate_fn([loader.dataset[(0, 0)]])
        yield spare, False  # its sums, set to zero, give evaluate their names and kinds
        batches -= 1
    for _ in range(batches - len(loader)):
        yield spare, False
