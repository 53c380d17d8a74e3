"""Specifications of the settings: each one that config.py records as changing the weights does,
and the research settings (accumulation, clipping, optimizers, schedules) resume exactly.

The perturbations run one after another in one fresh process, with the base run first and last:
if those two agree, nothing carried over from one run to the next, and each perturbed run differs
from the base for its setting alone.
"""

from __future__ import annotations

import dataclasses
import json
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
    python_env,
    read_run,
    start,
    start_module,
    training_steps,
    value_of,
    wait_until,
)

DEFAULTS = Config()
# A base where every setting can act: the cosine schedule takes --warmup-steps, SGD takes --momentum.
BASE = ("--epochs", "1", "--device", "cpu", "--max-samples", "64", "--batch-size", str(BATCH), "--schedule", "cosine",
        "--checkpoint-every", "0", "--seed", "7")
# For each setting that affects the weights, another value (set over BASE).
PERTURBED = {
    "seed": 8, "data_seed": (DEFAULTS.data_seed + 1) % 2**32, "epochs": 2, "batch_size": BATCH // 2, "accumulate": 2,
    "max_samples": 48, "optimizer": "adamw", "lr": DEFAULTS.lr * 2, "schedule": "constant", "warmup_steps": 3,
    "momentum": 0.5, "weight_decay": 0.05, "clip_grad_norm": 0.01, "width": max(1, DEFAULTS.width // 2),
    "dropout": 0.5 if DEFAULTS.dropout != 0.5 else 0.1, "precision": "bf16",
}
# Settings that change no weight, each with another value: the weights must stay.
UNCHANGED = {"val_batch_size": 7, "eval_every": 0, "log_every": 1, "checkpoint_every": 1, "num_workers": 1}
# Whether these change bits depends on the machine (GPU kernels, thread splits, a compiler): they
# are recorded and kept on --resume; the GPU and slow tiers test them where they act.
# --parallel acts under torchrun only; tests/test_fsdp.py shows where it changes no bit (2 gloo ranks).
MACHINE = {"threads", "cpu_kernels", "device", "deterministic", "compile", "parallel"}

RUNS_IN_ONE_PROCESS = """
import json, sys
from {package}.train import main
for name, argv in json.loads(sys.argv[1]).items():
    assert main(argv) == 0, name
"""


def flags_of(name: str, value) -> list[str]:
    return [flag(name), str(value)]


def perturbation_runs(root: Path) -> dict:
    runs = {"base": [], **{name: flags_of(name, value) for name, value in {**PERTURBED, **UNCHANGED}.items()},
            "momentum_under_one_cycle": ["--schedule", "one-cycle", "--momentum", "0.5"],
            "one_cycle": ["--schedule", "one-cycle"], "adamw": ["--optimizer", "adamw"],
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


def test_every_setting_that_affects_the_weights_has_a_perturbation_here():
    weights = {f.name for f in dataclasses.fields(Config) if effect_of(f.name) == "weights"}
    assert weights == set(PERTURBED), f"add a value to PERTURBED for: {sorted(weights - set(PERTURBED))}"
    assert {f.name for f in dataclasses.fields(Config) if effect_of(f.name) == "machine"} == MACHINE


def test_the_base_run_repeats_in_the_same_process_so_nothing_leaks_between_runs(perturbed):
    assert perturbed["base"].weights == perturbed["base_again"].weights
    assert perturbed["base"].metrics == perturbed["base_again"].metrics


@pytest.mark.parametrize("name", PERTURBED)
def test_each_setting_that_is_recorded_as_affecting_the_weights_changes_them(name, perturbed):
    run = perturbed[name]
    assert run.config[name] == PERTURBED[name]
    assert run.weights != perturbed["base"].weights, f"--{name} {PERTURBED[name]} gave the base's weights"


@pytest.mark.parametrize("name", UNCHANGED)
def test_each_setting_that_cannot_change_the_weights_leaves_them(name, perturbed):
    assert perturbed[name].config[name] == UNCHANGED[name]
    assert perturbed[name].weights == perturbed["base"].weights


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
    try:
        unclipped = gradient_norms_at_each_step(precision, 0.0)
    except RuntimeError as error:  # oneDNN has no fp16 LSTM on the CPU, for one
        pytest.skip(f"this task's model does not run in {precision} on the CPU: {str(error)[:100]}")
    limit = min(unclipped) / 4
    clipped = gradient_norms_at_each_step(precision, limit)
    assert all(norm > limit for norm in unclipped)
    assert clipped == pytest.approx([limit] * len(clipped), rel=1e-3)


# A run held inside an accumulation window: between two micro-batches of one optimizer step.
HELD_IN_A_WINDOW = """
import os, signal, sys
from pathlib import Path
import {package}.train as train

hold_at, marker, seed = int(sys.argv[1]), Path(sys.argv[2]), train.seed_step
micro_batches = [0]

def seed_then_hold(*args):  # train_step calls it before each micro-batch's forward pass
    micro_batches[0] += 1
    if micro_batches[0] == hold_at:
        marker.write_text(str(os.getpid()))
        signal.pause()
    seed(*args)

train.seed_step = seed_then_hold
sys.exit(train.main(sys.argv[3:]))
"""
ACCUMULATE = ("--epochs", "2", "--device", "cpu", "--max-samples", "96", "--batch-size", str(BATCH), "--accumulate",
              "4", "--checkpoint-every", "2", "--seed", "7")


def accumulation_runs(root: Path) -> dict:
    """An uninterrupted run with 4 micro-batches a step; the same held at the 3rd micro-batch of step
    4 (after the checkpoint of step 2), killed with SIGKILL, and resumed."""
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


def test_a_run_killed_inside_an_accumulation_window_resumes_to_the_same_weights(accumulated):
    runs = accumulated["runs"]
    assert accumulated["stopped"]["killed"][0] == -signal.SIGKILL
    assert runs["killed"].metrics == runs["reference"].metrics
    assert runs["killed"].weights == runs["reference"].weights


def test_a_step_of_an_accumulating_run_sees_the_global_batch(accumulated):
    run = accumulated["runs"]["reference"]
    samples = min(96, len(task.make_datasets(Config())[0]))
    assert run.config["accumulate"] == 4 and run.config["batch_size"] == BATCH
    assert run.summary["steps"] == 2 * -(-samples // BATCH)  # steps per epoch: global batches, not micro-batches


def learning_rates(schedule: str, warmup: int, steps: int = 20) -> list[float]:
    from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer

    config = Config(lr=0.1, schedule=schedule, warmup_steps=warmup)
    optimizer, scheduler = make_optimizer(torch.nn.Linear(2, 1), config, steps=steps)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_each_schedule_takes_the_learning_rates_it_promises():
    warm = learning_rates("constant", warmup=4)
    assert warm == pytest.approx([0.02, 0.04, 0.06, 0.08] + [0.1] * 16)
    cosine = learning_rates("cosine", warmup=4)
    assert cosine[:4] == warm[:4] and cosine[4] == pytest.approx(0.1)
    assert all(a > b for a, b in zip(cosine[4:], cosine[5:], strict=False)) and cosine[-1] < 0.01  # down towards 0
    cycle = learning_rates("one-cycle", warmup=0)
    assert max(cycle) == pytest.approx(0.1, rel=1e-3) and cycle[0] < 0.01 and cycle[-1] < 0.001
