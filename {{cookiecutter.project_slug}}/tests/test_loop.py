"""Specifications of the training loop's read-backs: the host never waits for the device per step."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine import distributed
from {{ cookiecutter.project_slug }}.engine.checkpoint import TrainingState
from {{ cookiecutter.project_slug }}.engine.contract import check_task
from {{ cookiecutter.project_slug }}.engine.loop import StepRows, accumulation_windows, seed_micro_step
from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer
from {{ cookiecutter.project_slug }}.engine.run_folder import MetricsLog
from {{ cookiecutter.project_slug }}.train import first, make_loaders
from {{ cookiecutter.project_slug }}.utils.repro import Stream, derive_seed, keyed_seed, seed_everything, seed_step

from conftest import BATCH, training_steps

# Every way a tensor's value reaches Python: each one makes the host wait for the device.
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")
LOOP_FILES = ("loop.py", "train.py", "conftest.py")


def count_reads(monkeypatch) -> list[str]:
    """Patches torch.Tensor so that each read made from the loop's own code is counted."""
    seen = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            caller = Path(sys._getframe(1).f_code.co_filename).name
            if caller in LOOP_FILES:
                seen.append(f"{_name} in {caller}")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return seen


def test_the_loop_reads_the_metrics_back_once_every_n_steps_not_once_a_step(tmp_path, monkeypatch):
    every, cpu = 5, torch.device("cpu")
    config = Config(seed=3, batch_size=BATCH // 4, max_samples=4 * every * BATCH, log_every=every)
    torch.manual_seed(3)
    train_set, val_set = task.make_datasets(config)
    model = task.make_model(config, train_set)
    loader, val_loader = make_loaders(first(train_set, config.max_samples), first(val_set, 16), config)
    optimizer, scheduler = make_optimizer(model, config, steps=1000)
    state = TrainingState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))
    log = MetricsLog(tmp_path / "metrics.csv", check_task(task, model, val_loader, cpu, "fp32"), rows=0, writes=True)
    log.create()
    rows = StepRows(log, task, cpu, every)
    reads = count_reads(monkeypatch)
    with log:
        for _, (sums, finite) in zip(range(2 * every), training_steps(model, loader, state, config, cpu), strict=False):
            rows.add(state.epoch, state.step, sums, finite)
    assert state.step == 2 * every and log.rows == 2 * every  # every step has its row...
    assert reads == ["tolist in loop.py"] * 2  # ...read back in one transfer per `every` steps


def draws_of_two_epochs(monkeypatch, between: int, rank: int = 0) -> list[float]:
    """What the model draws first (as dropout would) at each micro-batch of two epochs of 4 steps
    of 2 micro-batches, on rank `rank` (train_step reads it from engine.distributed), with
    `between` numbers drawn between the steps, as the loader or an evaluation would."""
    monkeypatch.setattr(distributed, "rank", lambda: rank)
    cpu = torch.device("cpu")
    config = Config(seed=3, batch_size=BATCH, accumulate=2, max_samples=4 * BATCH)
    train_set, val_set = task.make_datasets(config)
    torch.manual_seed(3)
    model = task.make_model(config, train_set)
    forward, drawn = model.forward, []

    def forward_that_draws(inputs):
        drawn.append(torch.rand(1).item())  # what dropout would draw first
        return forward(inputs)

    monkeypatch.setattr(model, "forward", forward_that_draws)
    loader, _ = make_loaders(first(train_set, config.max_samples), first(val_set, 16), config)
    optimizer, scheduler = make_optimizer(model, config, steps=1000)
    state = TrainingState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))
    for _ in range(2):
        for _ in training_steps(model, loader, state, config, cpu):
            torch.rand(between)
        state.epoch, state.epoch_step = state.epoch + 1, 0  # as train.py moves to the next epoch
    return drawn


def test_every_micro_batch_and_step_draws_from_its_own_key(monkeypatch):
    """What the model draws (dropout) is seeded before each micro-batch from (seed, step,
    micro-batch, rank): no two micro-batches, of one step or of two, of one epoch or of two, draw
    the same numbers, and a second pass over the same steps draws the same ones again."""
    first_pass = draws_of_two_epochs(monkeypatch, between=5)
    assert len(first_pass) == 16  # 2 epochs x 4 steps x 2 micro-batches
    assert len(set(first_pass)) == 16, (f"16 micro-batches drew only {len(set(first_pass))} different numbers: "
                                        "some share a key (micro-batches of one step seeded alike?)")
    assert draws_of_two_epochs(monkeypatch, between=7) == first_pass  # other draws between the steps change nothing


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_each_rank_draws_masks_of_its_own_that_no_other_rank_draws(monkeypatch, rank):
    """Under torchrun every rank takes the same steps on samples of its own: each draws masks of
    its own, as one process over the whole batch draws other masks for each sample. Ranks that
    drew rank 0's would put the same masks on every shard, and train other weights."""
    rank_0 = draws_of_two_epochs(monkeypatch, between=5)
    this_rank = draws_of_two_epochs(monkeypatch, between=5, rank=rank)
    assert len(set(this_rank)) == 16 and set(this_rank).isdisjoint(rank_0)
    assert draws_of_two_epochs(monkeypatch, between=7, rank=rank) == this_rank  # and repeats them


def draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_a_micro_batchs_draws_are_a_function_of_seed_step_micro_batch_and_rank_alone():
    """What train_step calls before each micro-batch's forward pass: dropout draws what it drew in
    any other run, and another seed, step, micro-batch or rank draws otherwise."""
    seed_micro_step(7, step=3, micro_batch=1, rank=0)
    expected = draws()
    seed_everything(4)  # whatever ran before: a loader, an evaluation, a resume
    seed_micro_step(7, step=3, micro_batch=1, rank=0)
    assert draws() == expected
    for other in ((8, 3, 1, 0), (7, 4, 1, 0), (7, 3, 0, 0), (7, 3, 1, 1)):
        seed_micro_step(*other)
        assert draws() != expected, other


def test_one_micro_batch_on_one_process_draws_what_utils_seed_step_draws():
    """The teaching loop's seed_step is this key at micro-batch 0 and rank 0: a task trains alike in both sizes."""
    seed_micro_step(7, step=3, micro_batch=0, rank=0)
    expected = draws()
    seed_step(7, step=3)
    assert draws() == expected


def test_a_micro_batch_seeds_the_gpu_it_runs_on_from_the_step_stream_of_its_key(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "manual_seed", calls.append)
    seed_micro_step(7, step=3, micro_batch=1, rank=2, device=torch.device("cuda"))
    assert calls == [keyed_seed(derive_seed(7, Stream.STEP, 2), 3, 1)]


class Regression:
    """A task of plain sums, without the example's BatchNorm or dropout."""

    @staticmethod
    def batch_sums(outputs, targets):
        return {"squared_error": ((outputs.squeeze(-1) - targets) ** 2).sum(), "samples": targets.numel()}

    @staticmethod
    def metrics_from_sums(sums):
        return {"loss": sums["squared_error"] / sums["samples"]}


def regression_data() -> tuple[torch.Tensor, torch.Tensor, torch.utils.data.TensorDataset]:
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(64, 5, generator=generator), torch.randn(64, generator=generator)
    return inputs, targets, torch.utils.data.TensorDataset(inputs, targets)


def regression_state(config: Config) -> TrainingState:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    optimizer, scheduler = make_optimizer(model, config, steps=100)
    return TrainingState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))


def test_under_ddp_only_the_last_micro_batch_of_a_window_all_reduces_its_gradients(tmp_path):
    """A real DistributedDataParallel, in a process group of one: the micro-batches before a
    window's last add up locally (DDP's no_sync), and the last one's backward pass all-reduces."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = DistributedDataParallel(torch.nn.Linear(2, 1))
        with distributed.no_sync(model, last_micro_batch=False):
            assert model.require_backward_grad_sync is False
        with distributed.no_sync(model, last_micro_batch=True):
            assert model.require_backward_grad_sync is True
        with distributed.no_sync(torch.nn.Linear(2, 1), last_micro_batch=False):  # no DDP: nothing to hold back
            pass
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("batch, accumulate", [(16, 2), (24, 3)])
def test_a_step_of_accumulated_micro_batches_is_the_step_a_plain_loop_takes_on_the_whole_batch(
        batch, accumulate, monkeypatch):
    """Micro-batches of batch/accumulate, each loss its share of the step's mean, make the gradient
    of the whole batch: the weights after three steps match those of a loop written by hand (to
    rounding: other sums). With 64 samples, batches of 24 in micro-batches of 8 end the epoch with
    an uneven window, two micro-batches where there were three: the plain loop's last batch of 16."""
    cpu = torch.device("cpu")
    inputs, targets, dataset = regression_data()
    from {{ cookiecutter.project_slug }} import train

    monkeypatch.setattr(train, "task", Regression)
    config = Config(seed=1, batch_size=batch, accumulate=accumulate, schedule="constant", lr=0.1, momentum=0.0,
                    weight_decay=0.0)
    loader, _ = make_loaders(dataset, dataset, config)
    state = regression_state(config)
    steps = 3  # of the first epoch: with batches of 24, all of it
    for _ in zip(range(steps), training_steps(state.model, loader, state, config, cpu), strict=False):
        pass
    accumulated = torch.cat([p.detach().flatten() for p in state.model.parameters()])
    order = [index for _, index in loader.sampler]
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    initial = torch.cat([p.detach().flatten() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):  # the loop a user writes: one batch a step, the epoch's last one shorter
        indices = order[step * batch:(step + 1) * batch]
        optimizer.zero_grad()
        loss = ((model(inputs[indices]).squeeze(-1) - targets[indices]) ** 2).mean()
        loss.backward()
        optimizer.step()
    plain = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert not torch.allclose(plain, initial, rtol=1e-3)  # the steps moved the weights...
    assert torch.allclose(accumulated, plain, rtol=1e-5, atol=1e-7)  # ...and both loops alike


def test_a_steps_sums_hold_every_micro_batch_of_its_window_the_uneven_last_one_too(monkeypatch):
    """What the step's metrics row is made of: the sums over all its samples, not the last micro-batch's."""
    _, _, dataset = regression_data()
    from {{ cookiecutter.project_slug }} import train

    monkeypatch.setattr(train, "task", Regression)
    config = Config(seed=1, batch_size=24, accumulate=3, schedule="constant", lr=0.1)
    loader, _ = make_loaders(dataset, dataset, config)
    state = regression_state(config)
    windows = list(accumulation_windows(loader, config.accumulate))
    assert [len(window) for window in windows] == [3, 3, 2]
    samples = [int(train.train_step(state.model, window, state, config, torch.device("cpu"))[0]["samples"])
               for window in windows]
    assert samples == [24, 24, 16]
