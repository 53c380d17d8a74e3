"""Specifications of evaluation: it observes the model and changes nothing."""

from __future__ import annotations

import pytest
import torch

from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.data import make_datasets
from {{ cookiecutter.project_slug }}.model import make_model
from {{ cookiecutter.project_slug }}.train import evaluate
from {{ cookiecutter.project_slug }}.utils.loader import make_loader

SEED = 5


@pytest.fixture(scope="module")
def trained():
    """A model trained a few steps (shared: evaluate must leave it unchanged, which the tests check)."""
    torch.manual_seed(SEED)
    config = Config(seed=SEED)
    train_set, val_set = make_datasets(config)
    train_images, train_labels = train_set.images, train_set.labels
    model = make_model(config)
    # A few training steps give BatchNorm running statistics that differ from their defaults,
    # so an evaluation that updated them would be caught.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    for start in range(0, 256, 64):
        images, labels = train_images[start : start + 64], train_labels[start : start + 64]
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    loader = make_loader(val_set, batch_size=64, seed=SEED, train=False)
    return model, loader


@pytest.fixture
def trained_model_and_loader(trained):
    model, loader = trained
    model.train()
    return model, loader


def test_evaluate_changes_no_parameter_and_no_batchnorm_statistic(trained_model_and_loader):
    model, loader = trained_model_and_loader
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    evaluate(model, loader, torch.device("cpu"))
    after = model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert any("running_mean" in name for name in before)


def test_two_evaluations_give_identical_results(trained_model_and_loader):
    model, loader = trained_model_and_loader
    assert evaluate(model, loader, torch.device("cpu")) == evaluate(model, loader, torch.device("cpu"))


def test_dropout_is_inactive_during_evaluation(trained_model_and_loader):
    model, loader = trained_model_and_loader
    seen = []
    dropout = next(m for m in model.modules() if isinstance(m, torch.nn.Dropout))
    hook = dropout.register_forward_hook(lambda module, inputs, output: seen.append(
        (module.training, torch.equal(inputs[0], output))))
    evaluate(model, loader, torch.device("cpu"))
    hook.remove()
    assert seen and all(not training and unchanged for training, unchanged in seen)


def test_evaluation_restores_the_mode_it_found(trained_model_and_loader):
    model, loader = trained_model_and_loader
    model.train()
    evaluate(model, loader, torch.device("cpu"))
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    evaluate(model, loader, torch.device("cpu"))
    assert not model.training


def test_evaluation_draws_no_random_number(trained_model_and_loader):
    model, loader = trained_model_and_loader
    state = torch.get_rng_state()
    evaluate(model, loader, torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), state)


def test_train_one_epoch_trains_in_train_mode_whatever_mode_it_found(trained_model_and_loader):
    """Dropout on and BatchNorm statistics updating, even if the model was left in eval mode."""
    from {{ cookiecutter.project_slug }}.checkpoint import TrainingState
    from {{ cookiecutter.project_slug }}.runs import MetricsLog
    from {{ cookiecutter.project_slug }}.train import train_one_epoch

    model, val_loader = trained_model_and_loader
    model.eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # no weight change: only the mode shows
    state = TrainingState(model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0),
                          torch.amp.GradScaler("cpu", enabled=False))
    train_one_epoch(model, val_loader, state, MetricsLog(None, rows=0, writes=False), torch.device("cpu"),
                    "fp32", stop_here=lambda: True)
    assert model.training and state.step == 1
