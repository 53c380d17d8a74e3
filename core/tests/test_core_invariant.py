"""Specifications of --invariant-shards (engine/invariant.py): one step gives the same bits on any
number of processes that divides the shards.

The figures are checked against what each test computes itself (which samples a shard holds, the
gradient of each shard alone added in shard order, BatchNorm's running statistics from each shard's
own), and across world sizes in real processes joined with gloo: 1, 2 and 4 ranks give one
weights hash, where the plain DDP-style step (each rank's mean, an all-reduce) gives three.
"""

from __future__ import annotations

import copy
import hashlib
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed
from repro_core.engine.invariant import (
    ShardBatches,
    in_shard_order,
    model_problem,
    shard_step,
    split,
)
from repro_core.engine.loader import ShardedEpochSampler, make_sharded_loader
from torch import nn

SHARDS = 4
BATCH = 16


class Net(nn.Module):
    """A Linear, a BatchNorm (batch statistics per shard, running statistics to keep) and dropout
    (draws to key by shard)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.norm, self.drop, self.out = nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Dropout(0.5), nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.drop(torch.relu(self.norm(self.inp(x)))))


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of step `step`: the same for every test and every process."""
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, 5, generator=generator), torch.randint(0, 3, (BATCH,), generator=generator)


def forward_of(model: nn.Module, step: int):
    """What train.py hands shard_step: one forward pass, its draws seeded by (step, shard)."""

    def forward(batch, micro_batch: int, shard: int):
        inputs, targets = batch
        torch.manual_seed(10_000 * step + 100 * micro_batch + shard)
        loss_sum = nn.functional.cross_entropy(model(inputs), targets, reduction="sum")
        sums = {"loss": loss_sum, "samples": torch.tensor(len(targets))}
        return sums, loss_sum / len(targets)

    return forward


def rank_share(batch, rank: int, world_size: int):
    """The rank's part of a global batch, as ShardedEpochSampler hands it out: positions rank,
    rank + world_size, ..."""
    return tuple(t[rank::world_size] for t in batch)


@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
def test_each_rank_holds_exactly_the_shards_cut_from_the_global_batch_by_position(world_size):
    shards, size = 8, 32
    positions = torch.arange(size)
    seen = {}
    for rank in range(world_size):
        sampler = ShardedEpochSampler(size, seed=0, shuffle=False, rank=rank, world_size=world_size)
        local = torch.tensor([index for _, index in sampler])
        assert torch.equal(local, positions[rank::world_size])  # what the loader gives the rank
        for shard, part in split(local, rank, world_size, shards):
            assert shard not in seen
            seen[shard] = part
            assert part.is_contiguous()
    assert sorted(seen) == list(range(shards))
    for shard, part in seen.items():
        assert torch.equal(part, positions[shard::shards]), f"shard {shard} at {world_size} ranks: {part.tolist()}"


def test_the_shards_are_added_one_by_one_in_shard_order():
    # float32 values whose sum depends on the order: 1e8 + 1 is 1e8, so only the order 0, 1, 2, 3 gives 1.
    rows = [torch.tensor([1e8]), torch.tensor([1.0]), torch.tensor([-1e8]), torch.tensor([1.0])]
    assert in_shard_order(rows, world_size=1).item() == 1.0
    assert torch.stack(rows).flip(0).sum(0).item() != 1.0  # another order, another sum: the values can tell


def test_many_shards_are_added_bit_for_bit_as_one_by_one_in_shard_order_not_by_a_reduction():
    """torch's own sum over a stacked dimension adds in blocks, not left to right: with 8 shards of
    float32 values its bits differ from one by one (seen on this CPU), and would differ by kernel."""
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randn(10, generator=generator) for _ in range(8)]
    one_by_one = rows[0].clone()
    for row in rows[1:]:
        one_by_one += row
    assert torch.equal(in_shard_order(rows, world_size=1), one_by_one)
    assert not torch.equal(torch.stack(rows).sum(dim=0), one_by_one)  # the control: a reduction's bits differ


def test_a_step_leaves_the_sum_in_shard_order_of_each_shards_own_gradient_and_statistics():
    torch.manual_seed(0)
    model = Net().train()
    reference = Net().train()
    reference.load_state_dict(model.state_dict())
    inputs, targets = data(step=1)

    sums, loss = shard_step(model, [(inputs, targets)], forward_of(model, 1), SHARDS)

    # The oracle: each shard's forward and backward alone, on reference, gradients added 0, 1, 2, 3.
    expected = None
    mean, var = reference.norm.running_mean.clone(), reference.norm.running_var.clone()
    for shard in range(SHARDS):
        part = (inputs[shard::SHARDS].contiguous(), targets[shard::SHARDS].contiguous())
        shard_sums, shard_loss = forward_of(reference, 1)(part, 0, shard)
        (shard_loss / SHARDS).backward()
        grads = [p.grad.clone() for p in reference.parameters()]
        reference.zero_grad(set_to_none=True)
        expected = grads if expected is None else [e + g for e, g in zip(expected, grads, strict=True)]
        with torch.no_grad():
            h = reference.inp(part[0])
        momentum = reference.norm.momentum
        mean = (1 - momentum) * mean + momentum * h.mean(0)
        var = (1 - momentum) * var + momentum * h.var(0, unbiased=True)
    for p, e in zip(model.parameters(), expected, strict=True):
        assert torch.equal(p.grad, e)
    assert torch.equal(model.norm.running_mean, mean) and torch.equal(model.norm.running_var, var)
    assert model.norm.num_batches_tracked.item() == SHARDS
    assert sums["samples"].item() == BATCH
    full = nn.functional.cross_entropy(model.eval()(inputs), targets)
    assert torch.isfinite(loss) and loss.item() != full.item()  # the shards' mean losses, with dropout, added


def test_every_batchnorm_of_a_model_gets_the_running_statistics_of_the_shards_in_shard_order():
    """Two BatchNorms of other widths, the second a cumulative average (momentum None): each one's
    statistics are its own. The oracle is BatchNorm itself: a copy of the model run on each shard
    alone, in shard order, updates its running statistics as the mode must."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 4),
                          nn.BatchNorm1d(4, momentum=None), nn.Linear(4, 3)).train()
    reference = copy.deepcopy(model)
    inputs, targets = data(step=1)
    shard_step(model, [(inputs, targets)], forward_of(model, 1), SHARDS)
    with torch.no_grad():
        for shard in range(SHARDS):
            reference(inputs[shard::SHARDS].contiguous())
    for norm, expected in ((model[1], reference[1]), (model[4], reference[4])):
        assert norm.num_batches_tracked.item() == expected.num_batches_tracked.item() == SHARDS
        torch.testing.assert_close(norm.running_mean, expected.running_mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(norm.running_var, expected.running_var, rtol=1e-5, atol=1e-6)


class Branching(nn.Module):
    """A second BatchNorm on a branch that some inputs take (its first feature above 0) and others not."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(5, 6), nn.Linear(6, 3)
        self.norm, self.branch = nn.BatchNorm1d(6), nn.BatchNorm1d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.inp(x))
        return self.out(self.branch(h) if x[0, 0] > 0 else h)


def test_a_batchnorm_that_a_shard_does_not_reach_takes_nothing_from_that_shard():
    """Shards 0 and 2 take the branch, 1 and 3 do not: the branch's BatchNorm updates twice, from
    shards 0 and 2, not again from what shard 0 left. The oracle, as above: BatchNorm itself on a
    copy of the model, shard by shard."""
    torch.manual_seed(0)
    model = Branching().train()
    reference = copy.deepcopy(model)
    inputs, targets = data(step=1)
    for shard in range(SHARDS):
        inputs[shard::SHARDS, 0] = 5.0 if shard % 2 == 0 else -5.0
    shard_step(model, [(inputs, targets)], forward_of(model, 1), SHARDS)
    with torch.no_grad():
        for shard in range(SHARDS):
            reference(inputs[shard::SHARDS].contiguous())
    assert model.branch.num_batches_tracked.item() == reference.branch.num_batches_tracked.item() == 2
    for name in ("norm", "branch"):
        norm, expected = getattr(model, name), getattr(reference, name)
        torch.testing.assert_close(norm.running_mean, expected.running_mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(norm.running_var, expected.running_var, rtol=1e-5, atol=1e-6)


def test_a_parameter_no_shard_reached_keeps_no_gradient():
    model = Net()
    model.unused = nn.Linear(2, 2)
    shard_step(model, [data(step=1)], forward_of(model, 1), SHARDS)
    assert model.unused.weight.grad is None and model.inp.weight.grad is not None


def test_evaluation_batches_cover_every_sample_once_never_mix_shards_and_are_the_same_on_any_world_size():
    size, batch = 37, 3
    by_world = {}
    for world_size in (1, 2, 4):
        batches = {}
        for rank in range(world_size):
            sampler = ShardBatches(size, SHARDS, batch, rank, world_size)
            for i, keys in enumerate(sampler):
                shard = sampler.shard_of(i)
                assert all(index % SHARDS == shard for _, index in keys), "a batch mixes shards"
                batches.setdefault(shard, []).append([index for _, index in keys])
        assert sorted(index for parts in batches.values() for part in parts for index in part) == list(range(size))
        by_world[world_size] = batches
    assert by_world[1] == by_world[2] == by_world[4]


def test_training_pads_to_a_multiple_of_the_shards_the_same_on_any_world_size():
    """The run's loader (make_sharded_loader) with the mode on: on 1, 2 and 4 processes, one order,
    padded to a multiple of the shards, not of the world size."""
    size = 37
    orders = {}
    for world_size in (1, 2, 4):
        samplers = [make_sharded_loader(list(range(size)), BATCH, 3, True, rank=rank, world_size=world_size,
                                        invariant_shards=SHARDS).sampler for rank in range(world_size)]
        assert all(isinstance(sampler, ShardedEpochSampler) for sampler in samplers)
        assert len({len(sampler) for sampler in samplers}) == 1  # every rank takes as many steps
        orders[world_size] = samplers[0].order()
        assert len(orders[world_size]) % SHARDS == 0
    assert orders[1] == orders[2] == orders[4]


def test_what_the_mode_cannot_make_invariant_is_named_in_one_line():
    assert model_problem(Net()) is None
    synced = nn.Sequential(nn.Linear(2, 2), nn.SyncBatchNorm(2))
    line = model_problem(synced)
    assert "SyncBatchNorm" in line and "\n" not in line
    nested = model_problem(nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.SyncBatchNorm(2))))
    assert nested is not None and "model's 1.1 is a SyncBatchNorm" in nested  # inside a block too, named by its path
    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())
    assert "dtypes" in model_problem(mixed)


# Each rank runs three steps of one model on its share of each global batch, in this mode and in the
# plain DDP way (each rank's mean, gradients all-reduced and averaged), and writes both hashes.
WORKER = textwrap.dedent('''
    import hashlib, os, sys
    import torch
    import torch.distributed as dist
    sys.path.insert(0, sys.argv[2])
    from test_core_invariant import Net, data, forward_of, rank_share, SHARDS, weights_sha256
    from repro_core.engine.invariant import shard_step

    world = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    if world > 1:
        dist.init_process_group("gloo")
    torch.set_num_threads(1)
    hashes = {}
    for mode in ("invariant", "accumulated", "plain"):
        torch.manual_seed(0)
        model = Net().train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for step in range(1, 4):
            share = rank_share(data(step), rank, world)
            if mode == "invariant":
                shard_step(model, [share], forward_of(model, step), SHARDS)
            elif mode == "accumulated":  # two micro-batches of 8: each rank's share of each half of the batch
                halves = [tuple(t[i * 8:(i + 1) * 8] for t in data(step)) for i in (0, 1)]
                shard_step(model, [rank_share(half, rank, world) for half in halves], forward_of(model, step), SHARDS)
            else:
                torch.manual_seed(10_000 * step + rank)
                torch.nn.functional.cross_entropy(model(share[0]), share[1]).backward()
                for p in model.parameters():
                    if world > 1:
                        dist.all_reduce(p.grad)
                    p.grad /= world
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        hashes[mode] = weights_sha256(model)
    with open(os.path.join(sys.argv[1], f"{world}-{rank}.txt"), "w") as out:
        out.write(hashes["invariant"] + " " + hashes["plain"] + " " + hashes["accumulated"])
    if world > 1:
        dist.destroy_process_group()
''')


def weights_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch has no torch.distributed")
def test_one_two_and_four_gloo_ranks_step_to_the_same_weights_where_plain_ddp_gives_three(tmp_path):
    """Also with two micro-batches a step (--accumulate 2)."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    here = str(Path(__file__).resolve().parent)
    processes = []
    for world in (1, 2, 4):
        port = free_port()
        for rank in range(world):
            env = {**os.environ, "WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(rank),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
            log = open(tmp_path / f"{world}-{rank}.log", "w")  # noqa: SIM115 (closed below)
            processes.append((subprocess.Popen([sys.executable, str(script), str(tmp_path), here], env=env,
                                               stdout=log, stderr=subprocess.STDOUT), log))
    for process, log in processes:
        code = process.wait(timeout=300)
        log.close()
        assert code == 0, Path(log.name).read_text()
    seen = {world: {(tmp_path / f"{world}-{rank}.txt").read_text().split()[0] for rank in range(world)}
            for world in (1, 2, 4)}
    plain = {world: (tmp_path / f"{world}-0.txt").read_text().split()[1] for world in (1, 2, 4)}
    accumulated = {world: {(tmp_path / f"{world}-{rank}.txt").read_text().split()[2] for rank in range(world)}
                   for world in (1, 2, 4)}
    assert all(len(hashes) == 1 for hashes in seen.values()), f"ranks disagree: {seen}"
    assert seen[1] == seen[2] == seen[4], f"the world size changed the weights: {seen}"
    assert accumulated[1] == accumulated[2] == accumulated[4] and len(accumulated[1]) == 1, accumulated
    assert accumulated[1] != seen[1]  # two micro-batches of four shards: other passes, other bits
    assert len(set(plain.values())) == 3, f"the negative control: plain DDP at 1, 2, 4 ranks gave {plain}"


def test_two_micro_batches_leave_the_gradient_of_the_mean_loss_over_both():
    """Each shard's mean loss is divided by the step's number of shards, of every micro-batch: what
    is left in .grad is the gradient of the step's mean loss (the oracle: one backward over both
    batches together, computed here; equal up to rounding, since the additions come in another order).
    Divided by the shards of one micro-batch only, two micro-batches would step twice as far."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    reference = copy.deepcopy(model)
    batches = [data(step=1), data(step=2)]

    def forward(batch, micro_batch: int, shard: int):
        loss_sum = nn.functional.cross_entropy(model(batch[0]), batch[1], reduction="sum")
        return {"loss": loss_sum}, loss_sum / len(batch[1])

    shard_step(model, batches, forward, SHARDS)
    assert BATCH % SHARDS == 0  # equal shards: the mean of their means is the batch's mean
    inputs, targets = (torch.cat(parts) for parts in zip(*batches, strict=True))
    nn.functional.cross_entropy(reference(inputs), targets).backward()
    for parameter, expected in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(parameter.grad, expected.grad)


def test_a_model_without_batchnorm_steps_as_well():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Dropout(0.5), nn.Linear(4, 3)).train()

    def forward(batch, micro_batch: int, shard: int):
        torch.manual_seed(shard)
        loss_sum = nn.functional.cross_entropy(model(batch[0]), batch[1], reduction="sum")
        return {"loss": loss_sum}, loss_sum / len(batch[1])

    sums, loss = shard_step(model, [data(step=1), data(step=2)], forward, SHARDS)  # two micro-batches
    assert all(p.grad is not None for p in model.parameters()) and torch.isfinite(loss)
