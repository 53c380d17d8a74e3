"""Specifications of evaluation beyond tests/test_eval_mode.py (eval mode, nothing changed, the same figures
twice, the mode restored): every figure a float, the whole split's mean, dropout off; and training
in train mode whatever mode the model was in."""

from __future__ import annotations

import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.checkpoint import TrainingState
from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer
from {{ cookiecutter.project_slug }}.train import evaluate, first, make_loaders

from conftest import BATCH, FAST, SAMPLES, precision_problem, training_steps

CPU = torch.device("cpu")
CONFIG = Config(seed=5, device="cpu", batch_size=BATCH, max_samples=SAMPLES)


def autocast_in_effect() -> torch.dtype | None:
    """The dtype CPU autocast computes in here, or None when it is off."""
    try:
        return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
    except (AttributeError, TypeError):  # torch before 2.4
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None


def state_for(model: torch.nn.Module, lr: float = 0.05) -> TrainingState:
    optimizer, scheduler = make_optimizer(model, Config(lr=lr, schedule="constant"), steps=1000)
    return TrainingState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))


@pytest.fixture(scope="module")
def trained():
    """A model trained a few steps with the real loop (shared: evaluate must leave it unchanged,
    which the tests check). Training moves BatchNorm's running statistics, if the model has any,
    away from their defaults, so an evaluation that updated them would be caught."""
    torch.manual_seed(CONFIG.seed)
    train_set, val_set = task.make_datasets(CONFIG)
    model = task.make_model(CONFIG, train_set)
    train_loader, val_loader = make_loaders(first(train_set, SAMPLES), first(val_set, SAMPLES), CONFIG)
    for _ in zip(range(4), training_steps(model, train_loader, state_for(model), CONFIG), strict=False):
        pass
    return model, val_loader, train_loader


@pytest.fixture
def trained_model_and_loader(trained):
    model, loader, _ = trained
    model.train()
    return model, loader


def test_evaluation_returns_every_figure_of_the_task_as_a_float(trained_model_and_loader):
    model, loader = trained_model_and_loader
    figures = evaluate(model, loader, CPU)
    assert "loss" in figures and task.HEADLINE_METRIC in figures
    assert all(type(value) is float for value in figures.values())


def test_evaluation_averages_over_the_whole_split_not_over_batches(trained_model_and_loader):
    """The sums are added up before the task divides: the figures do not depend on how the split
    is cut into batches (to rounding: float sums in another order)."""
    model, loader = trained_model_and_loader
    _, other_loader = make_loaders(*(first(s, SAMPLES) for s in task.make_datasets(CONFIG)),
                                   Config(**{**CONFIG.to_dict(), "val_batch_size": 7}))
    whole, in_sevens = evaluate(model, loader, CPU), evaluate(model, other_loader, CPU)
    assert whole == pytest.approx(in_sevens, rel=1e-5)


def test_dropout_is_inactive_during_evaluation(trained_model_and_loader):
    model, loader = trained_model_and_loader
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    if not dropouts:
        pytest.skip("this project's model has no dropout")
    seen = []
    hooks = [d.register_forward_hook(lambda module, inputs, output: seen.append(
        (module.training, torch.equal(inputs[0], output)))) for d in dropouts]
    evaluate(model, loader, CPU)
    for hook in hooks:
        hook.remove()
    assert seen and all(not training and unchanged for training, unchanged in seen)


def test_training_runs_in_train_mode_whatever_mode_the_model_was_left_in(tmp_path, monkeypatch):
    """Dropout on and BatchNorm statistics updating at every step, even for a model that make_model
    (or an evaluation that forgot to restore the mode) left in eval mode."""
    from {{ cookiecutter.project_slug }} import train

    make_model, train_step, modes = task.make_model, train.train_step, []
    monkeypatch.setattr(task, "make_model", lambda config, train_set: make_model(config, train_set).eval())

    def noting_the_mode(model, *args):
        modes.append(model.training)
        return train_step(model, *args)

    monkeypatch.setattr(train, "train_step", noting_the_mode)
    assert train.main(["--out", str(tmp_path / "run"), *FAST, "--epochs", "2"]) == 0
    assert modes and all(modes), modes  # the second epoch too, after the first one's evaluation


@pytest.mark.parametrize("precision, dtype", [("fp32", None), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_evaluation_computes_in_the_runs_precision(precision, dtype, trained, monkeypatch):
    """What --precision bf16 or fp16 trains in, it is evaluated in: the task's sums are taken under autocast."""
    problem = precision_problem(precision) if precision != "fp32" else None
    if problem:  # the task's model has no kernel for it on this CPU: conftest's reason, as the precision tests skip
        pytest.skip(problem)
    model, val_loader, _ = trained
    seen, real = [], task.batch_sums
    monkeypatch.setattr(task, "batch_sums", lambda outputs, targets: seen.append(autocast_in_effect()) or
                        real(outputs, targets))
    evaluate(model, val_loader, CPU, precision)
    assert seen and set(seen) == {dtype}
