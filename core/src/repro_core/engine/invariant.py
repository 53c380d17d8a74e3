"""--invariant-shards N: one run gives the same bits on 1, 2, 4 ... N processes (DDP's place).

Under plain DDP a run's bits change with its number of processes, for three reasons: each rank's
gradient is the mean over its own share of the batch (a share whose size is batch / world), the
all-reduce adds the ranks' gradients in an order of its own (a ring, a tree: another order for
another world size), and each rank draws dropout masks of its own. Every framework accepts this
(torchtitan's debugging guide, Lightning, Composer). This mode removes all three, at a price:

- Each micro-batch of the global batch is cut into N shards by position: shard k holds the
  samples at positions k, k + N, k + 2N ... (ShardedEpochSampler hands rank r of w the positions
  r, r + w, ..., so rank r holds exactly the shards r, r + w, r + 2w ...; `split` cuts them out).
  A shard's samples are the same whatever the world size, and so is its shape.
- Each shard is a forward and backward pass of its own, its dropout keyed by (seed, step,
  micro-batch, shard), never by rank: the same gradient whichever rank computes it.
- The shards' gradients are gathered (a copy: no arithmetic) and added one by one in shard order
  on every rank (`in_shard_order`): every rank, at every world size, adds the same numbers in
  the same order, and steps its own optimizer to the same weights. No DDP wrapper, no all-reduce.
- BatchNorm's batch statistics are each shard's own (its forward pass sees only the shard). Its
  running statistics, which each rank would update from its own shards only, are updated once
  per step in shard order from every shard's statistics (`ShardNorms`).
- Evaluation: the split is cut into N shards the same way; each shard is scored in batches of its
  own, and the sums added in shard order (`ShardBatches`, `in_shard_order`).

The price: N smaller forward passes where DDP makes one per rank, and an all-gather of N rows of
all the gradients where DDP all-reduces one (memory: N / world rows of the gradients on each rank,
N rows while they are added). docs/distributed.md gives the measured figures.

What it cannot make invariant is refused in one line (`model_problem`): SyncBatchNorm (its
statistics are over ranks), parameters of more than one dtype. FSDP (its reduce-scatter adds in an
order of its own) and fp16 (a loss scale per rank) are refused by the project's settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._pytree import tree_map

Sums = dict[str, torch.Tensor]


def shards_of_rank(rank: int, world_size: int, shards: int) -> list[int]:
    """The shards rank `rank` of `world_size` holds: rank, rank + world_size, ..."""
    return list(range(rank, shards, world_size))


def split(batch: object, rank: int, world_size: int, shards: int) -> list[tuple[int, object]]:
    """(shard, its part of `batch`) for each shard this rank holds, in shard order. `batch` is this
    rank's micro-batch (any nesting of tensors whose first dimension is the sample). Each part is
    made contiguous: a strided view would let a kernel take another code path on one rank than on
    another."""
    held = shards_of_rank(rank, world_size, shards)
    return [(shard, tree_map(lambda t, i=i: t[i::len(held)].contiguous() if isinstance(t, torch.Tensor) else t,
                             batch)) for i, shard in enumerate(held)]


def gather_rows(local: list[torch.Tensor], world_size: int) -> torch.Tensor:
    """Every shard's tensor as one [shards, ...] tensor in shard order, from this rank's shards'
    tensors in `local` (rank r of w: shards r, r + w, ...): gathered from every rank, a copy,
    exact. One process: no gather."""
    rows = torch.stack(local)
    if world_size == 1:
        return rows
    gathered = [torch.empty_like(rows) for _ in range(world_size)]
    dist.all_gather(gathered, rows.contiguous())
    return torch.stack([gathered[shard % world_size][shard // world_size] for shard in range(len(local) * world_size)])


def in_shard_order(local: list[torch.Tensor], world_size: int) -> torch.Tensor:
    """The sum over every shard of a tensor each shard gave (this rank's in `local`), added one by
    one in shard order, 0, 1, 2 ..., on every rank alike: the same numbers in the same order,
    whatever the world size (an all-reduce adds in an order that depends on it)."""
    rows = gather_rows(local, world_size)
    total = rows[0].clone()
    for row in rows[1:]:
        total += row
    return total


def sums_in_shard_order(local: list[Sums], world_size: int) -> Sums:
    """Each name's sum over every shard (its shards' sums on this rank in `local`), in shard order."""
    return {name: in_shard_order([torch.as_tensor(sums[name]) for sums in local], world_size) for name in local[0]}


def model_problem(model: nn.Module) -> str | None:
    """Why this model cannot give the same bits on any world size in this mode, or None."""
    for name, module in model.named_modules():
        if isinstance(module, nn.SyncBatchNorm):
            return (f"--invariant-shards: the model's {name} is a SyncBatchNorm, whose statistics are over the ranks "
                    "(so over a share that depends on their number): use BatchNorm (each shard's own statistics)")
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) > 1:
        return (f"--invariant-shards: the model's parameters are of {len(dtypes)} dtypes "
                f"({', '.join(sorted(map(str, dtypes)))}); this mode adds gradients as one flat tensor of one dtype")
    return None


def same_weights_on_every_rank(model: nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank (what DDP does when it wraps a model): every
    rank then steps the same weights with the same gradients."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)


def flat_gradient(parameters: list[nn.Parameter]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every parameter's gradient as one flat tensor (zeros for one that has none), and which had
    one (1 or 0 each); the gradients are then cleared for the next shard."""
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in parameters])
    had = torch.tensor([float(p.grad is not None) for p in parameters], device=flat.device)
    for p in parameters:
        p.grad = None
    return flat, had


def set_gradients(parameters: list[nn.Parameter], flat: torch.Tensor, had: torch.Tensor) -> None:
    """The inverse of flat_gradient: each parameter's .grad cut out of `flat`, or None for one that
    had a gradient in no shard (as after a backward pass that did not reach it: the optimizer then
    leaves it alone, weight decay and momentum included)."""
    offset = 0
    for p, any_shard in zip(parameters, had.tolist(), strict=True):
        p.grad = flat[offset: offset + p.numel()].view_as(p).clone() if any_shard else None
        offset += p.numel()


class ShardNorms:
    """BatchNorm's running statistics, updated in shard order. While active, a hook notes each
    BatchNorm's batch statistics (mean and unbiased variance per channel) in each training forward
    pass; at finish(), what BatchNorm itself did (update from this rank's shards only) is replaced
    by an update from the statistics before the step and every shard's, one shard at a time in
    (micro-batch, shard) order, as BatchNorm updates them: running = (1 - momentum) * running +
    momentum * the shard's (momentum None: a cumulative average)."""

    def __init__(self, model: nn.Module) -> None:
        self.norms = [m for m in model.modules()
                      if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
        self.seen: dict[int, torch.Tensor] = {}  # this shard's statistics, by BatchNorm

    def __enter__(self) -> ShardNorms:
        self.before = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone())
                       for m in self.norms]
        self.hooks = [m.register_forward_pre_hook(lambda module, args, i=i: self.note(i, module, args))
                      for i, m in enumerate(self.norms)]
        return self

    def __exit__(self, *exc) -> None:
        for hook in self.hooks:
            hook.remove()

    def note(self, i: int, module: nn.Module, args: tuple) -> None:
        if module.training:
            x = args[0].detach().float()
            dims = [0, *range(2, x.dim())]
            self.seen[i] = torch.cat([x.mean(dims), x.var(dims, unbiased=True), torch.ones(1, device=x.device)])

    def take(self) -> torch.Tensor:
        """This shard's statistics as one row: each BatchNorm's mean, variance and 1, or zeros for
        one that made no training forward pass (it updates nothing)."""
        row = torch.cat([self.seen[i] if i in self.seen else torch.zeros(2 * m.num_features + 1,
                                                                           device=m.running_mean.device)
                         for i, m in enumerate(self.norms)])
        self.seen = {}
        return row

    def finish(self, tables: list[torch.Tensor]) -> None:
        """Sets the running statistics from those before the step and `tables` (for each
        micro-batch, every shard's row of take(): a [shards, row] tensor, in shard order)."""
        start = 0
        for m, (mean, var, count) in zip(self.norms, self.before, strict=True):
            c = m.num_features
            for row in (row for table in tables for row in table):
                if not row[start + 2 * c]:  # no training forward pass of this BatchNorm in this shard
                    continue
                count = count + 1
                factor = 1.0 / float(count) if m.momentum is None else m.momentum
                mean = (1 - factor) * mean + factor * row[start: start + c].to(mean.dtype)
                var = (1 - factor) * var + factor * row[start + c: start + 2 * c].to(var.dtype)
            m.running_mean.copy_(mean)
            m.running_var.copy_(var)
            m.num_batches_tracked.copy_(count)
            start += 2 * c + 1


def shard_step(model: nn.Module, micro_batches: list, forward: Callable[[object, int, int], tuple[Sums, torch.Tensor]],
               shards: int) -> tuple[Sums, torch.Tensor]:
    """The gradients of one optimizer step over `micro_batches` (this rank's share of each), left
    in every parameter's .grad, the same on every rank and at every world size: each shard's
    forward and backward alone (`forward(part, micro_batch, shard)` seeds its draws and gives its
    sums and mean loss), its loss divided by the step's number of shards, the gradients added in
    (micro-batch, shard) order. Returns the step's sums over every shard, and its loss (each
    micro-batch's mean loss, added: what train_step checks is finite), the same on every rank."""
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    parameters = [p for p in model.parameters() if p.requires_grad]
    total = had = step_sums = step_loss = None
    tables = []
    with ShardNorms(model) as norms:
        for micro_batch, batch in enumerate(micro_batches):
            gradients, touched, sums, statistics = [], [], [], []
            for shard, part in split(batch, rank, world_size, shards):
                shard_sums, loss = forward(part, micro_batch, shard)
                (loss / (len(micro_batches) * shards)).backward()
                gradient, reached = flat_gradient(parameters)
                gradients.append(gradient)
                touched.append(reached)
                sums.append({**{name: torch.as_tensor(value, device=loss.device).detach()
                                for name, value in shard_sums.items()},
                             "~loss": loss.detach() / shards})
                if norms.norms:
                    statistics.append(norms.take())
            added, reached = in_shard_order(gradients, world_size), in_shard_order(touched, world_size)
            total, had = (added, reached) if total is None else (total + added, had + reached)
            micro_sums = sums_in_shard_order(sums, world_size)
            loss = micro_sums.pop("~loss")
            step_loss = loss if step_loss is None else step_loss + loss
            step_sums = micro_sums if step_sums is None else {n: step_sums[n] + v for n, v in micro_sums.items()}
            if norms.norms:
                tables.append(gather_rows(statistics, world_size))
        norms.finish(tables)
    set_gradients(parameters, total, had)
    return step_sums, step_loss


class ShardBatches:
    """Evaluation's batches under --invariant-shards: the split cut into `shards` shards by position
    (shard k: samples k, k + N, ...), rank r of w scoring shards r, r + w, ..., each in batches of
    its own of `batch_size` (a batch never mixes shards). A shard's batches are the same whatever
    the world size; `shard_of(i)` says which shard this rank's i-th batch is of. Yields the
    (epoch, index) keys that KeyedRandomness expects (epoch 0, as the validation loader's)."""

    def __init__(self, size: int, shards: int, batch_size: int, rank: int = 0, world_size: int = 1) -> None:
        self.batches: list[tuple[int, list[int]]] = []
        for shard in shards_of_rank(rank, world_size, shards):
            indices = list(range(shard, size, shards))
            self.batches += [(shard, indices[i: i + batch_size]) for i in range(0, len(indices), batch_size)]

    def shard_of(self, i: int) -> int:
        return self.batches[i][0]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter([[(0, index) for index in indices] for _, indices in self.batches])

    def __len__(self) -> int:
        return len(self.batches)
