"""engine/optim.py in this process: which parameters decay, the optimizer each setting makes, and
the learning rate each schedule gives each step, against formulas written out here."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from repro_core.engine.optim import NO_DECAY_MODULES, make_optimizer, parameter_groups, warmup_then
from torch import nn


def settings(**changes) -> SimpleNamespace:
    """The settings make_optimizer reads, as a project's config holds them: SGD, cosine, no decay."""
    return SimpleNamespace(**{"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "beta2": 0.99, "weight_decay": 0.0,
                              "weight_decay_on": "all", "schedule": "cosine", "warmup_steps": 0, "min_lr": 0.0,
                              "decay_steps": 0, **changes})


class Scale(nn.Module):
    """A task's own norm (nanoGPT's LayerNorm): a class no list can know, with a 1-D gain."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(4))
        self.bias = nn.Parameter(torch.zeros(2, 4))  # a bias of two dimensions: exempt by its name alone


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(5, 4)
        self.norm = nn.LayerNorm(4)
        self.scale = Scale()
        self.hidden = nn.Linear(4, 4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embedding.weight  # tied, as nanoGPT ties its embedding and output layer


def names(model: nn.Module, group: dict) -> list[str]:
    by_id = {id(parameter): name for name, parameter in model.named_parameters()}
    return [by_id[id(parameter)] for parameter in group["params"]]


def test_decay_on_all_is_one_group_of_every_parameter():
    model = Model()
    [group] = parameter_groups(model, 0.1, "all")
    assert names(model, group) == [name for name, _ in model.named_parameters()] and group["weight_decay"] == 0.1


def test_decay_on_weights_decays_only_matrices_outside_embeddings_and_norms_each_shared_parameter_once():
    model = Model()
    decayed, exempt = parameter_groups(model, 0.1, "weights")
    assert names(model, decayed) == ["hidden.weight"] and decayed["weight_decay"] == 0.1
    # The embedding (tied to the head: exempt by either, listed once), torch's norm, the task's own
    # 1-D gain and the bias, in the model's order.
    assert names(model, exempt) == ["embedding.weight", "norm.weight", "norm.bias", "scale.gain", "scale.bias",
                                    "hidden.bias"]
    assert exempt["weight_decay"] == 0.0
    assert nn.LayerNorm in NO_DECAY_MODULES and nn.Embedding in NO_DECAY_MODULES


def test_a_matrix_of_a_norm_class_is_exempt_by_its_class():
    model = nn.Sequential(nn.Linear(3, 3), nn.GroupNorm(1, 3))
    model[1].weight = nn.Parameter(torch.ones(3, 1))  # two dimensions: only its class exempts it
    decayed, exempt = parameter_groups(model, 0.5, "weights")
    assert names(model, decayed) == ["0.weight"] and names(model, exempt) == ["0.bias", "1.weight", "1.bias"]


@pytest.mark.parametrize("decay", [0.0, 0.25])
def test_sgd_takes_the_rate_the_momentum_and_the_decay(decay):
    model = nn.Linear(2, 2)
    optimizer, _ = make_optimizer(model, settings(weight_decay=decay, momentum=0.7, lr=0.3, schedule="constant"), 10)
    assert type(optimizer) is torch.optim.SGD
    [group] = optimizer.param_groups
    assert (group["momentum"], group["weight_decay"], group["initial_lr"]) == (0.7, decay, 0.3)


def test_adamw_takes_the_momentum_as_beta1_and_beta2_and_the_decay():
    model = nn.Linear(2, 2)
    config = settings(optimizer="adamw", momentum=0.8, beta2=0.95, weight_decay=0.1, weight_decay_on="weights")
    optimizer, _ = make_optimizer(model, config, 10)
    assert type(optimizer) is torch.optim.AdamW
    decayed, exempt = optimizer.param_groups
    assert decayed["betas"] == (0.8, 0.95) and (decayed["weight_decay"], exempt["weight_decay"]) == (0.1, 0.0)
    assert decayed["initial_lr"] == 0.1
    assert [p is model.weight for p in decayed["params"]] == [True]


def test_a_tasks_own_groups_are_used_as_given():
    model = nn.Linear(2, 2)
    groups = [{"params": [model.bias], "weight_decay": 0.3}, {"params": [model.weight], "weight_decay": 0.0}]
    optimizer, _ = make_optimizer(model, settings(weight_decay=0.1, weight_decay_on="weights"), 10, groups)
    assert [(g["params"], g["weight_decay"]) for g in optimizer.param_groups] == [([model.bias], 0.3),
                                                                                 ([model.weight], 0.0)]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_tasks_group_that_names_no_decay_takes_the_weight_decay_setting(optimizer):
    model = nn.Linear(2, 2)
    groups = [{"params": [model.weight]}, {"params": [model.bias], "weight_decay": 0.0}]
    made, _ = make_optimizer(model, settings(optimizer=optimizer, weight_decay=0.2), 10, groups)
    assert [group["weight_decay"] for group in made.param_groups] == [0.2, 0.0]


def rates(config: SimpleNamespace, steps: int) -> list[float]:
    """The learning rate of each of `steps` optimizer steps, as the run's loop takes them."""
    optimizer, schedule = make_optimizer(nn.Linear(1, 1), config, steps)
    taken = []
    for _ in range(steps):
        taken.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return taken


def nanogpt_lr(step: int, lr: float, warmup: int, end: int, min_lr: float) -> float:
    """nanoGPT's get_lr(it), with its warm-up counted as this project counts it ((s + 1) / (warmup + 1))."""
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step >= end:
        return min_lr
    ratio = (step - warmup) / (end - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


@pytest.mark.parametrize("warmup, decay_steps, min_lr", [(0, 0, 0.0), (3, 0, 0.01), (2, 6, 0.02)])
def test_cosine_warms_up_then_falls_to_min_lr_at_its_end_and_stays(warmup, decay_steps, min_lr):
    steps, lr = 10, 0.1
    end = decay_steps or steps - 1  # 0: the run's last step
    taken = rates(settings(schedule="cosine", warmup_steps=warmup, decay_steps=decay_steps, min_lr=min_lr), steps)
    assert taken == pytest.approx([nanogpt_lr(s, lr, warmup, end, min_lr) for s in range(steps)], rel=1e-12)
    assert taken[end] == pytest.approx(min_lr) and taken[0] == pytest.approx(lr / (warmup + 1))


def test_constant_warms_up_then_keeps_the_rate():
    assert rates(settings(schedule="constant", warmup_steps=3, min_lr=0.05), 7) == pytest.approx(
        [0.025, 0.05, 0.075, 0.1, 0.1, 0.1, 0.1])


def test_one_cycle_spans_the_runs_steps_and_leaves_the_momentum_as_set():
    steps = 20
    optimizer, schedule = make_optimizer(nn.Linear(1, 1), settings(schedule="one-cycle", momentum=0.5), steps)
    assert type(schedule) is torch.optim.lr_scheduler.OneCycleLR and schedule.total_steps == steps
    taken = []
    for _ in range(steps):
        taken.append(optimizer.param_groups[0]["lr"])
        assert optimizer.param_groups[0]["momentum"] == 0.5  # cycle_momentum would move it
        optimizer.step()
        schedule.step()
    assert taken[0] == pytest.approx(0.1 / 25) and max(taken) == pytest.approx(0.1)
    assert taken[-1] == pytest.approx(0.1 / 25 / 1e4)


def test_warmup_then_gives_the_factor_of_each_step():
    cosine = warmup_then("cosine", 2, 6, 0.1)
    half_cosine = [0.1 + 0.45 * (1 + math.cos(math.pi * quarter / 4)) for quarter in range(4)]  # 1.0 .. at step 5
    assert [cosine(s) for s in range(8)] == pytest.approx([1 / 3, 2 / 3, *half_cosine, 0.1, 0.1])
    assert warmup_then("cosine", 0, 4)(4) == 0.0  # the floor's default: down to nothing
    assert [warmup_then("constant", 1, 4, 0.5)(s) for s in range(3)] == [0.5, 1.0, 1.0]


@pytest.mark.parametrize("warmup, end", [(0, 0), (5, 5)], ids=["a one-step run", "the decay ending with the warm-up"])
def test_a_cosine_that_has_no_steps_to_fall_over_is_at_its_floor_from_its_end_on(warmup, end):
    """--decay-steps equal to --warmup-steps, or a run of one step: nothing left to fall over, so the
    floor from step `end` on (not a division of the fall by its length, zero)."""
    factor = warmup_then("cosine", warmup, end, 0.1)
    assert [factor(s) for s in range(end, end + 3)] == [0.1, 0.1, 0.1]
    assert [factor(s) for s in range(warmup)] == pytest.approx([(s + 1) / (warmup + 1) for s in range(warmup)])
