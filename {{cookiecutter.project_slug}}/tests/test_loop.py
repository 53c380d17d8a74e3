"""Specifications of the training loop's read-backs: the host never waits for the device per step."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.checkpoint import TrainingState
from {{ cookiecutter.project_slug }}.engine.contract import check_task
from {{ cookiecutter.project_slug }}.engine.loop import StepRows, training_steps
from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer
from {{ cookiecutter.project_slug }}.engine.run_folder import MetricsLog
from {{ cookiecutter.project_slug }}.train import first, make_loaders

from conftest import BATCH

# Every way a tensor's value reaches Python: each one makes the host wait for the device.
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")
LOOP_FILES = ("loop.py", "train.py")


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
        for _, sums in zip(range(2 * every), training_steps(model, loader, state, config, task, cpu), strict=False):
            rows.add(state.epoch, state.step, sums)
    assert state.step == 2 * every and log.rows == 2 * every  # every step has its row...
    assert reads == ["tolist in loop.py"] * 2  # ...read back in one transfer per `every` steps


def test_every_micro_batch_and_step_draws_from_its_own_key(monkeypatch):
    """What the model draws (dropout) is seeded before each micro-batch from (seed, step,
    micro-batch, rank): no two micro-batches, of one step or of two, draw the same numbers, and
    a second pass over the same steps draws the same ones again."""
    cpu = torch.device("cpu")
    config = Config(seed=3, batch_size=BATCH, accumulate=2, max_samples=4 * BATCH)
    train_set, val_set = task.make_datasets(config)

    def draws_of_two_steps() -> list[float]:
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
        for _ in zip(range(2), training_steps(model, loader, state, config, task, cpu), strict=False):
            torch.rand(5)  # whatever runs between steps (the loader, an evaluation) draws too
        return drawn

    first_pass = draws_of_two_steps()
    assert len(first_pass) == 4 and len(set(first_pass)) == 4  # 2 steps x 2 micro-batches, all different
    assert draws_of_two_steps() == first_pass
