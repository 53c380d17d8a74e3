"""Specifications of the settings: each one that config.py records as changing the weights does,
and the research settings (accumulation, clipping, optimizers, schedules) resume exactly.

The perturbations run one after another in one fresh process, with the base run first and last:
if those two agree, nothing carried over from one run to the next, and each perturbed run differs
from the base for its setting alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import sys
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config, effect_of, flag

from conftest import (
    BATCH,
    PACKAGE,
    once,
    precision_problem,
    python_env,
    read_run,
    start,
    start_module,
    training_steps,
    value_of,
    wait_until,
)

DEFAULTS = Config()
# A base where every setting can act: the cosine schedule takes --warmup-steps and --min-lr, SGD
# takes --momentum.
BASE = ("--epochs", "1", "--device", "cpu", "--max-samples", "64", "--batch-size", str(BATCH), "--schedule", "cosine",
        "--checkpoint-every", "0", "--seed", "7")
# For each setting that affects the weights, another value (set over BASE, or over the run that
# ON names, where the setting needs another to act).
PERTURBED = {
    "seed": 8, "data_seed": (DEFAULTS.data_seed + 1) % 2**32, "epochs": 2, "batch_size": BATCH // 2, "accumulate": 2,
    "max_samples": 48, "optimizer": "adamw", "lr": DEFAULTS.lr * 2, "schedule": "constant", "warmup_steps": 3,
    "min_lr": DEFAULTS.lr / 10, "decay_steps": 2, "momentum": 0.5, "beta2": 0.95, "weight_decay": 0.05,
    "weight_decay_on": "weights", "clip_grad_norm": 0.01, "width": max(1, DEFAULTS.width // 2),
    "dropout": 0.5 if DEFAULTS.dropout != 0.5 else 0.1, "precision": "bf16",
    "invariant_shards": 4,  # 4 passes of 4 samples a step, not 1 of 16 (1 shard: one pass, as without it)
}
REFERENCES = {"adamw": ["--optimizer", "adamw"], "one_cycle": ["--schedule", "one-cycle"],
              "default_epochs": ["--epochs", str(DEFAULTS.epochs)]}
# AdamW's alone; --max-steps, which replaces --epochs, against a run of the default --epochs.
ON = {"beta2": "adamw", "max_steps": "default_epochs"}
# Settings that change no weight, each with another value: the weights must stay.
UNCHANGED = {"val_batch_size": 7, "eval_every": 0, "log_every": 1, "checkpoint_every": 1, "num_workers": 1,
             "keep_best": "max:loss"}
# Whether these change bits depends on the machine (GPU kernels, thread splits, a compiler): they
# are recorded and kept on --resume; the GPU and slow tiers test them where they act.
# --parallel acts under torchrun only; tests/test_fsdp.py shows where it changes no bit (2 gloo ranks).
MACHINE = {"threads", "cpu_kernels", "device", "deterministic", "compile", "parallel"}
# Settings proven by tests of their own: they need others to act, or what they change is not weights.
ELSEWHERE = {"nonfinite": "tests/test_nonfinite.py", "tensorboard": "tests/test_tracking.py",
             "persistent_workers": "tests/test_invariance.py", "prefetch_factor": "tests/test_invariance.py",
             "world_size": "tests/test_distributed.py (torchrun sets it)",
             "init_from": "tests/test_train.py (it needs a file of weights to start from)",
             "early_stop": "tests/test_steps.py (it needs --keep-best and evaluations that stop improving)"}


def another_value(setting: dataclasses.Field):
    """A value other than the default, for a setting this file does not list (one you added to
    config.py, or one whose effect you changed): None if there is no obvious one."""
    default, choices = setting.default, setting.metadata["choices"]
    if choices:
        return next(choice for choice in choices if choice != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default / 2 if default else 0.5
    return None


def perturbations(effects: tuple[str, ...], listed: dict) -> dict:
    """Another value for each setting whose effect is one of `effects`: the one listed here, else
    another_value's."""
    return {f.name: listed[f.name] if f.name in listed else another_value(f)
            for f in dataclasses.fields(Config) if effect_of(f.name) in effects and f.name not in ELSEWHERE}


WEIGHTS = perturbations(("weights",), PERTURBED)
NO_WEIGHTS = perturbations(("evaluation", "execution"), UNCHANGED)

RUNS_IN_ONE_PROCESS = """
import json, sys
from {package}.train import main
for name, argv in json.loads(sys.argv[1]).items():
    assert main(argv) == 0, name
"""


def cannot_run_here(name: str, value) -> str | None:
    """Why the run that sets `name` to `value` cannot run on this machine (a precision the task's
    ops have no kernel for on this CPU), or None."""
    return precision_problem(value) if name == "precision" else None


def flags_of(name: str, value) -> list[str]:
    return [*REFERENCES.get(ON.get(name), []), flag(name), str(value)]


def perturbation_runs(root: Path) -> dict:
    perturbed = {name: flags_of(name, value) for name, value in {**WEIGHTS, **NO_WEIGHTS}.items()
                 if not cannot_run_here(name, value)}
    runs = {"base": [], **REFERENCES, **perturbed,
            "momentum_under_one_cycle": ["--schedule", "one-cycle", "--momentum", "0.5"],
            "momentum_under_adamw": ["--optimizer", "adamw", "--momentum", "0.5"], "base_again": []}
    argvs = {name: [*BASE, *extra, "--out", str(root / name)] for name, extra in runs.items()}
    process = start([sys.executable, "-c", RUNS_IN_ONE_PROCESS.format(package=PACKAGE), json.dumps(argvs)],
                    root / "perturbed.log", env=python_env(PYTHONHASHSEED="7"))
    assert process.wait() == 0, process.stderr[-3000:]
    return {name: read_run(root / name) for name in runs}


@pytest.fixture(scope="module")
def perturbed_or_failure(tmp_path_factory):
    return once(lambda: perturbation_runs(tmp_path_factory.mktemp("perturbed")))


@pytest.fixture
def perturbed(perturbed_or_failure, request):
    return value_of(perturbed_or_failure, request)


def test_every_setting_is_perturbed_here_or_proven_elsewhere():
    """A setting you add to config.py is perturbed with another_value's choice; one it cannot
    choose for needs a value in PERTURBED or UNCHANGED."""
    missing = [name for name, value in {**WEIGHTS, **NO_WEIGHTS}.items() if value is None]
    assert not missing, f"add another value for {', '.join(missing)} to PERTURBED (or UNCHANGED) in this file"
    assert set(ELSEWHERE) <= {f.name for f in dataclasses.fields(Config)}  # no stale entry


def test_the_base_run_repeats_in_the_same_process_so_nothing_leaks_between_runs(perturbed):
    assert perturbed["base"].weights == perturbed["base_again"].weights
    assert perturbed["base"].metrics == perturbed["base_again"].metrics


@pytest.mark.parametrize("name", WEIGHTS)
def test_each_setting_that_is_recorded_as_affecting_the_weights_changes_them(name, perturbed):
    if cannot_run_here(name, WEIGHTS[name]):
        pytest.skip(cannot_run_here(name, WEIGHTS[name]))
    run, reference = perturbed[name], perturbed[ON.get(name, "base")]
    assert run.config[name] == WEIGHTS[name]
    assert run.weights != reference.weights, (
        f"{flag(name)} {WEIGHTS[name]} gave the weights of the run without it: if task.py ignores "
        f"config.{name}, read it there, or give {name} another effect in config.py")


@pytest.mark.parametrize("name", NO_WEIGHTS)
def test_each_setting_that_cannot_change_the_weights_leaves_them(name, perturbed):
    assert perturbed[name].config[name] == NO_WEIGHTS[name]
    assert perturbed[name].weights == perturbed["base"].weights, (
        f"{flag(name)} {NO_WEIGHTS[name]} changed the weights: its effect in config.py is "
        f"{effect_of(name)!r}, which promises it cannot; if it does, say 'weights'")


def test_momentum_acts_under_the_one_cycle_schedule_and_as_adamws_beta1_too(perturbed):
    """OneCycleLR cycles momentum itself unless told not to, which would make --momentum inert;
    for AdamW the flag is beta1."""
    assert perturbed["momentum_under_one_cycle"].weights != perturbed["one_cycle"].weights
    assert perturbed["momentum_under_adamw"].weights != perturbed["adamw"].weights


def gradient_norms_at_each_step(precision: str, clip: float) -> list[float]:
    """Trains 3 steps in this process; the total gradient norm the optimizer saw at each step."""
    from {{ cookiecutter.project_slug }}.engine.checkpoint import TrainingState
    from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer
    from {{ cookiecutter.project_slug }}.engine.precision import make_scaler
    from {{ cookiecutter.project_slug }}.train import first, make_loaders

    config = Config(seed=3, batch_size=BATCH, precision=precision, clip_grad_norm=clip, lr=1e-4)
    torch.manual_seed(3)
    train_set, val_set = task.make_datasets(config)
    model = task.make_model(config, train_set)
    loader, _ = make_loaders(first(train_set, 64), first(val_set, 64), config)
    optimizer, scheduler = make_optimizer(model, config, steps=100)
    norms = []

    def record_norm(optimizer, args, kwargs):  # runs as the optimizer steps: after scaling and clipping
        grads = [p.grad.detach().flatten() for p in model.parameters() if p.grad is not None]
        norms.append(float(torch.cat(grads).norm()))

    optimizer.register_step_pre_hook(record_norm)
    cpu = torch.device("cpu")
    state = TrainingState(model, optimizer, scheduler, make_scaler(precision, cpu))
    for _ in zip(range(3), training_steps(model, loader, state, config, cpu), strict=False):
        pass
    return norms


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_clipping_limits_the_true_gradient_norm_also_under_fp16s_loss_scale(precision):
    """fp16's GradScaler multiplies the gradients by its scale (65536 at first): clipping must see
    them unscaled, or it clips the scaled ones and the step takes a 65536 times smaller gradient."""
    if precision_problem(precision):  # oneDNN has no fp16 LSTM on the CPU, for one
        pytest.skip(precision_problem(precision))
    unclipped = gradient_norms_at_each_step(precision, 0.0)
    limit = min(unclipped) / 4
    clipped = gradient_norms_at_each_step(precision, limit)
    assert all(norm > limit for norm in unclipped)
    assert clipped == pytest.approx([limit] * len(clipped), rel=1e-3)


# A run held inside an accumulation window: between two micro-batches of one optimizer step.
HELD_IN_A_WINDOW = """
import os, signal, sys
from pathlib import Path
import {package}.train as train

hold_at, marker, seed = int(sys.argv[1]), Path(sys.argv[2]), train.seed_micro_step
micro_batches = [0]

def seed_then_hold(*args):  # train_step calls it before each micro-batch's forward pass
    micro_batches[0] += 1
    if micro_batches[0] == hold_at:
        marker.write_text(str(os.getpid()))
        signal.pause()
    seed(*args)

train.seed_micro_step = seed_then_hold
sys.exit(train.main(sys.argv[3:]))
"""
# nanoGPT's recipe through flags (train.py's defaults in nanoGPT: AdamW with betas 0.9 and 0.95,
# decay on weights alone, warm-up, cosine to a tenth of the peak, clipping at 1, accumulation).
NANOGPT_RECIPE = ("--optimizer", "adamw", "--lr", "0.003", "--beta2", "0.95", "--weight-decay", "0.1",
                  "--weight-decay-on", "weights", "--schedule", "cosine", "--warmup-steps", "2", "--min-lr", "0.0003",
                  "--clip-grad-norm", "1.0")
ACCUMULATE = ("--epochs", "2", "--device", "cpu", "--max-samples", "96", "--batch-size", str(BATCH), "--accumulate",
              "4", "--checkpoint-every", "2", "--seed", "7", *NANOGPT_RECIPE)


def accumulation_runs(root: Path) -> dict:
    """An uninterrupted run of nanoGPT's recipe with 4 micro-batches a step; the same held at the
    3rd micro-batch of step 4 (after the checkpoint of step 2), killed with SIGKILL, and resumed."""
    reference = start_module("train", *ACCUMULATE, "--out", str(root / "reference"), log=root / "reference.log")
    held = {}
    for name in ("killed",):
        marker = root / f"{name}.held"
        command = [sys.executable, "-c", HELD_IN_A_WINDOW.format(package=PACKAGE), str(3 * 4 + 3), str(marker)]
        held[name] = (start([*command, *ACCUMULATE, "--out", str(root / name)], root / f"{name}.log",
                            env=python_env(PYTHONHASHSEED="7")), marker)
    stopped = {}
    for name, (process, marker) in held.items():
        wait_until(marker.exists, process, "reaching the middle of step 4")
        process.kill_group(signal.SIGKILL)
        stopped[name] = (process.wait(), process.stderr)
        process.kill_group(signal.SIGKILL)
    resumed = {name: start_module("train", "--out", str(root / name), "--resume", log=root / f"{name}-resumed.log")
               for name in held}
    for name, process in (("reference", reference), *resumed.items()):
        assert process.wait() == 0, f"{name}: {process.stderr[-3000:]}"
    return {"runs": {name: read_run(root / name) for name in ("reference", *held)}, "stopped": stopped}


@pytest.fixture(scope="module")
def accumulated_or_failure(tmp_path_factory):
    return once(lambda: accumulation_runs(tmp_path_factory.mktemp("accumulate")))


@pytest.fixture
def accumulated(accumulated_or_failure, request):
    return value_of(accumulated_or_failure, request)


def test_a_run_of_nanogpts_recipe_killed_inside_an_accumulation_window_resumes_to_the_same_weights(accumulated):
    """Its schedule, AdamW's moments and the two parameter groups come back from the checkpoint:
    every row, learning rates included, and the weights are the run's that never stopped."""
    runs = accumulated["runs"]
    assert accumulated["stopped"]["killed"][0] == -signal.SIGKILL
    assert runs["killed"].metrics == runs["reference"].metrics
    assert runs["killed"].weights == runs["reference"].weights


@pytest.mark.parametrize("batches, accumulate, steps", [(8, 1, 8), (8, 4, 2), (9, 4, 3), (10, 4, 3), (3, 4, 1)])
def test_an_epochs_optimizer_steps_count_an_uneven_last_window_as_one(batches, accumulate, steps):
    """The schedule's length: a last window of fewer than --accumulate micro-batches still steps."""
    from {{ cookiecutter.project_slug }}.train import steps_per_epoch

    assert steps_per_epoch(range(batches), Config(accumulate=accumulate)) == steps


def test_an_accumulating_runs_schedule_spans_its_optimizer_steps_not_its_micro_batches(accumulated):
    """Each row's lr is nanoGPT's get_lr over the run's real step count: warm-up from the first
    step, --min-lr at the last (a schedule counted in micro-batches would be 4 times too long)."""
    run = accumulated["runs"]["reference"]
    rows = [row for row in run.metrics if row["split"] == "train"]
    assert len(rows) == run.summary["steps"]
    expected = [nanogpt_get_lr(it, 0.003, 2, len(rows) - 1, 0.0003) for it in range(len(rows))]
    assert [float(row["lr"]) for row in rows] == pytest.approx(expected, rel=1e-12)
    middle = len(rows) // 2
    print(f"lr at steps 1, {middle + 1}, {len(rows)}: {rows[0]['lr']} {rows[middle]['lr']} {rows[-1]['lr']}; "
          f"get_lr: {expected[0]!r} {expected[middle]!r} {expected[-1]!r}")


def test_a_step_of_an_accumulating_run_sees_the_global_batch(accumulated):
    run = accumulated["runs"]["reference"]
    samples = min(96, len(task.make_datasets(Config())[0]))
    assert run.config["accumulate"] == 4 and run.config["batch_size"] == BATCH
    assert run.summary["steps"] == 2 * -(-samples // BATCH)  # steps per epoch: global batches, not micro-batches


def learning_rates(steps: int = 20, **settings) -> list[float]:
    """The learning rate each of `steps` optimizer steps takes under Config(**settings), lr 0.1 unless given."""
    from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer

    optimizer, scheduler = make_optimizer(torch.nn.Linear(2, 1), Config(**{"lr": 0.1, **settings}),
                                          steps=steps)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def nanogpt_get_lr(it: int, learning_rate: float, warmup_iters: int, lr_decay_iters: int, min_lr: float) -> float:
    """nanoGPT's train.py get_lr, written out as it is there: the schedule --schedule cosine promises."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def test_the_constant_schedule_warms_up_linearly_then_holds_the_peak():
    assert learning_rates(schedule="constant", warmup_steps=4) == pytest.approx([0.02, 0.04, 0.06, 0.08] + [0.1] * 16)


@pytest.mark.parametrize("warmup, decay_steps, min_lr", [(4, 0, 0.0), (4, 0, 0.01), (2, 12, 0.005), (0, 0, 0.0)])
def test_the_cosine_schedule_is_nanogpts_get_lr_to_min_lr_at_the_decay_step_or_the_last(warmup, decay_steps, min_lr):
    rates = learning_rates(schedule="cosine", warmup_steps=warmup, decay_steps=decay_steps, min_lr=min_lr)
    end = decay_steps or len(rates) - 1
    assert rates == pytest.approx([nanogpt_get_lr(it, 0.1, warmup, end, min_lr) for it in range(len(rates))],
                                  rel=1e-12, abs=1e-15)
    assert rates[0] == pytest.approx(0.1 / (warmup + 1)) and rates[-1] == pytest.approx(min_lr, abs=1e-15)
    assert all(rate == pytest.approx(min_lr, abs=1e-15) for rate in rates[end:])  # reached, then kept


def test_a_cosine_whose_warm_up_takes_every_step_but_the_last_ends_there_at_min_lr():
    # The cosine then has no step to decay over: its last step is its end, never a division by zero.
    assert learning_rates(5, schedule="cosine", warmup_steps=4, min_lr=0.01) == pytest.approx(
        [0.02, 0.04, 0.06, 0.08, 0.01])


def test_one_cycle_starts_at_a_25th_of_the_peak_reaches_it_and_ends_at_a_25th_of_a_10000th():
    cycle = learning_rates(schedule="one-cycle")
    assert cycle[0] == pytest.approx(0.1 / 25) and max(cycle) == pytest.approx(0.1, rel=1e-3)
    assert cycle[-1] == pytest.approx(0.1 / 25 / 1e4)


def test_metrics_csv_has_the_learning_rate_each_step_took(perturbed):
    """The cosine base: every train row's lr is the schedule's at that step (step 1 takes index 0)."""
    run = perturbed["warmup_steps"]
    rows = [row for row in run.metrics if row["split"] == "train"]
    rates = learning_rates(len(rows), lr=run.config["lr"], schedule="cosine", warmup_steps=run.config["warmup_steps"])
    assert [float(row["lr"]) for row in rows] == rates
    assert float(rows[-1]["lr"]) == 0.0  # the cosine's last step: its --min-lr


class TiedWithNorms(torch.nn.Module):
    """An embedding tied to the output layer, a norm, a linear layer with a bias, a BatchNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding, self.norm = torch.nn.Embedding(5, 4), torch.nn.LayerNorm(4)
        self.hidden, self.batch_norm = torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)
        self.head = torch.nn.Linear(4, 5, bias=False)
        self.head.weight = self.embedding.weight


@pytest.mark.parametrize("schedule", ["constant", "one-cycle"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("decay_on", ["weights", "all"])
def test_the_optimizer_is_the_one_named_with_each_of_its_settings_in_each_group(optimizer, decay_on, schedule):
    from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer

    config = Config(optimizer=optimizer, lr=0.03, momentum=0.7, beta2=0.9, weight_decay=0.2, weight_decay_on=decay_on,
                    schedule=schedule, warmup_steps=0)
    made, _ = make_optimizer(TiedWithNorms(), config, steps=10)
    assert type(made) is {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[optimizer]
    assert [group["weight_decay"] for group in made.param_groups] == ([0.2, 0.0] if decay_on == "weights" else [0.2])
    for group in made.param_groups:
        # The peak the schedule scales (one-cycle starts at a 25th of it); the momentum stays
        # --momentum, under one-cycle too (which would cycle it by default).
        assert group["initial_lr"] == (0.03 if schedule == "constant" else 0.03 / 25)
        if optimizer == "adamw":
            assert group["betas"] == (0.7, 0.9)  # --momentum is AdamW's beta1
        else:
            assert group["momentum"] == 0.7
    model = TiedWithNorms()  # a task's own groups: one that names no weight decay takes --weight-decay
    own, _ = make_optimizer(model, config, steps=10, groups=[{"params": list(model.parameters())}])
    assert own.param_groups[0]["weight_decay"] == 0.2


def test_weight_decay_on_weights_exempts_biases_norms_and_embeddings_and_lists_a_tied_one_once():
    from {{ cookiecutter.project_slug }}.engine.optim import parameter_groups

    model = TiedWithNorms()
    decayed, exempt = parameter_groups(model, 0.1, "weights")
    assert decayed["weight_decay"] == 0.1 and exempt["weight_decay"] == 0.0
    assert [id(p) for p in decayed["params"]] == [id(model.hidden.weight)]
    assert {id(p) for p in exempt["params"]} == {id(p) for name, p in model.named_parameters()
                                                if name != "hidden.weight"}
    assert len(exempt["params"]) == len(list(model.parameters())) - 1  # the tied weight once
    (every,) = parameter_groups(model, 0.1, "all")
    assert len(every["params"]) == len(list(model.parameters())) and every["weight_decay"] == 0.1


def test_a_tasks_own_parameter_groups_are_the_optimizers(tmp_path, monkeypatch):
    """task.parameter_groups(model, config), when task.py has it, replaces --weight-decay-on's
    rule: its groups, with their own settings, are what a checkpoint's optimizer holds."""
    from {{ cookiecutter.project_slug }}.engine.checkpoint import read_checkpoint
    from {{ cookiecutter.project_slug }}.train import main

    def first_and_rest(model, config):
        parameters = list(model.parameters())
        return [{"params": parameters[:1], "weight_decay": 0.0, "lr": config.lr / 10}, {"params": parameters[1:]}]

    monkeypatch.setattr(task, "parameter_groups", first_and_rest, raising=False)
    assert main([*BASE, "--stop-after-steps", "1", "--out", str(tmp_path / "run")]) == 0
    state, _ = read_checkpoint(sorted((tmp_path / "run" / "checkpoints").glob("step-*.pt"))[-1])
    groups = state["optimizer"]["param_groups"]
    assert len(groups) == 2 and len(groups[0]["params"]) == 1
    assert groups[0]["weight_decay"] == 0.0 and groups[1]["weight_decay"] == DEFAULTS.weight_decay
    assert groups[0]["initial_lr"] == pytest.approx(groups[1]["initial_lr"] / 10)
