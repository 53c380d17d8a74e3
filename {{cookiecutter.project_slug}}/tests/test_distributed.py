"""Specifications under torchrun: two gloo processes on the CPU, started the way users start them.

Selected with `pytest -m distributed` (a plain `pytest` leaves them out to stay fast).
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace

import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.train import evaluate, first, make_loaders

from conftest import (
    FAST,
    PACKAGE,
    ended_in_time,
    held_at_step_code,
    once,
    python_env,
    read_run,
    start,
    steps_per_epoch,
    two_nodes,
    value_of,
    wait_until,
)

pytestmark = pytest.mark.distributed


def launch(root):
    """Three `torchrun --standalone --nproc_per_node=2` launches on loopback and one plain run,
    all at once."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    commands = {
        "seed7": [*torchrun, "-m", f"{PACKAGE}.train", *FAST, "--seed", "7"],
        "seed7_again": [*torchrun, "-m", f"{PACKAGE}.train", *FAST, "--seed", "7"],
        "seed8": [*torchrun, "-m", f"{PACKAGE}.train", *FAST, "--seed", "8"],
        "seed7_one_process": [sys.executable, "-m", f"{PACKAGE}.train", *FAST, "--seed", "7"],
    }
    processes = {name: start([*command, "--out", str(root / name)], root / f"{name}.log")
                 for name, command in commands.items()}
    results = {}
    for name, process in processes.items():
        assert process.wait() == 0, f"{name}:\n{process.stderr[-3000:]}"
        results[name] = (read_run(root / name), process.stdout)
    return results


@pytest.fixture(scope="module")
def ddp_runs_or_failure(tmp_path_factory):
    return once(lambda: launch(tmp_path_factory.mktemp("ddp")))


@pytest.fixture
def ddp_runs(ddp_runs_or_failure, request):
    return value_of(ddp_runs_or_failure, request)


def test_two_torchrun_launches_with_one_seed_give_identical_weights(ddp_runs):
    (first, _), (second, _) = ddp_runs["seed7"], ddp_runs["seed7_again"]
    assert first.summary["world_size"] == first.config["world_size"] == 2
    assert first.metrics == second.metrics
    assert first.weights == second.weights


def test_another_seed_under_torchrun_gives_other_weights(ddp_runs):
    assert ddp_runs["seed8"][0].weights != ddp_runs["seed7"][0].weights


def test_only_rank_0_writes_and_prints(ddp_runs):
    run, stdout = ddp_runs["seed7"]
    assert sorted(path.name for path in run.path.iterdir()) == sorted(
        ["checkpoints", "config.json", "environment.json", "metrics.csv", "model.pt", "summary.json"])
    assert stdout.count("weights_sha256") == 1  # one summary line, not one per rank
    lines = (run.path / "metrics.csv").read_text().splitlines()
    assert lines[0] == ",".join(["epoch", "step", "split", "lr", *run.metric_names]) and lines.count(lines[0]) == 1
    steps = [int(line.split(",")[1]) for line in lines[1:] if ",train," in line]
    assert steps == list(range(1, len(steps) + 1))  # one row per step, in order, none interleaved


def test_a_torchrun_runs_validation_figures_are_its_final_models_on_the_whole_validation_set(ddp_runs):
    """Evaluated again here, in one process, over every validation sample, model.pt gives the
    figures the two ranks recorded together (each rank evaluated its share; the sums were added
    across ranks): neither half of the set alone. To rounding, as the sums add in another order."""
    run, _ = ddp_runs["seed7"]
    config = replace(Config.from_dict(run.config)[0], world_size=1)
    train_set, val_set = task.make_datasets(config)
    model = task.make_model(config, train_set)
    model.load_state_dict(torch.load(run.path / "model.pt", weights_only=True))
    _, val_loader = make_loaders(first(train_set, config.max_samples), first(val_set, config.max_samples), config)
    figures = evaluate(model, val_loader, torch.device("cpu"), config.precision)
    assert figures == pytest.approx({name: run.summary[f"val_{name}"] for name in figures}, rel=1e-5)


def test_a_different_world_size_is_a_different_run(ddp_runs):
    """Not a guarantee but a fact worth a test: other batches, other reduction order."""
    assert ddp_runs["seed7_one_process"][0].config["world_size"] == 1
    assert ddp_runs["seed7"][0].weights != ddp_runs["seed7_one_process"][0].weights


def two_node_runs(root):
    """A two-node run; and one held mid-epoch on both nodes, SIGTERMed there (as a preempting
    scheduler does), then launched again with --resume."""
    step = steps_per_epoch() - 2
    script = root / "held_train.py"
    script.write_text(held_at_step_code())
    whole = two_nodes(root, "two_nodes", ["-m", f"{PACKAGE}.train", *FAST, "--seed", "7"])
    marker = root / "held"
    held = two_nodes(root, "interrupted", [str(script), str(step), str(marker), *FAST, "--seed", "7"],
                     env=python_env(PYTHONHASHSEED="7"))
    for rank in (0, 1):
        wait_until(marker.with_name(f"held.{rank}").exists, held[rank], f"rank {rank} reaching step {step}")
    for rank in (0, 1):  # the training processes themselves; torchrun then ends with their failure
        os.kill(int(marker.with_name(f"held.{rank}").read_text()), signal.SIGTERM)
    for agent in held:
        assert agent.wait() != 0
    # Both ranks agreed to stop after that step and wrote its checkpoint before leaving.
    assert (root / "interrupted" / "checkpoints" / f"step-{step:08d}.pt").exists()
    resumed = two_nodes(root, "interrupted", ["-m", f"{PACKAGE}.train", *FAST, "--seed", "7", "--resume"])
    for name, agent in (("two_nodes", whole[0]), ("two_nodes", whole[1]), ("interrupted", resumed[0]),
                        ("interrupted", resumed[1])):
        assert agent.wait() == 0, f"{name}: {agent.stderr[-3000:]}"
    return {name: read_run(root / name) for name in ("two_nodes", "interrupted")}


@pytest.fixture(scope="module")
def two_node_runs_or_failure(tmp_path_factory):
    return once(lambda: two_node_runs(tmp_path_factory.mktemp("nodes")))


@pytest.fixture
def nodes(two_node_runs_or_failure, request):
    return value_of(two_node_runs_or_failure, request)


def test_two_nodes_of_one_process_give_the_weights_of_one_node_of_two(nodes, ddp_runs):
    two_nodes_run, one_node = nodes["two_nodes"], ddp_runs["seed7"][0]
    assert two_nodes_run.config["world_size"] == 2
    assert two_nodes_run.metrics == one_node.metrics
    assert two_nodes_run.weights == one_node.weights


def test_a_two_node_run_stopped_by_sigterm_and_launched_again_with_resume_ends_with_the_same_weights(nodes, ddp_runs):
    resumed = nodes["interrupted"]
    assert resumed.metrics == ddp_runs["seed7"][0].metrics
    assert resumed.weights == ddp_runs["seed7"][0].weights


def held_torchrun(root, step: int, prelude: str = ""):
    """`torchrun --nproc_per_node=2` of train into root/run, both ranks held after `step`:
    (the launcher, the two workers' process ids), once both are held."""
    script, marker = root / "held.py", root / "held"
    script.write_text(held_at_step_code(prelude))
    launcher = start([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                      str(script), str(step), str(marker), *FAST, "--seed", "7", "--out", str(root / "run")],
                     root / "launcher.log", env=python_env(PYTHONHASHSEED="7"))
    for rank in (0, 1):
        wait_until(marker.with_name(f"held.{rank}").exists, launcher, f"rank {rank} reaching step {step}")
    return launcher, [int(marker.with_name(f"held.{rank}").read_text()) for rank in (0, 1)]


# A prelude for the held harness: SIGUSR1 releases a held rank without asking it to stop (train
# leaves SIGUSR1 alone; the hold ends once a handler has run).
RELEASE_WITHOUT_STOPPING = "signal.signal(signal.SIGUSR1, lambda signum, frame: None)"


@pytest.mark.parametrize("signalled", [0, 1])
def test_sigterm_to_one_rank_alone_stops_every_rank_after_the_same_step_with_its_checkpoint(signalled, tmp_path):
    """A scheduler or a user may signal one process of a job. The ranks agree after each step
    whether any of them was asked to stop, so the other one stops there too, instead of training
    on alone into a collective that never completes. Each rank in turn is the one signalled."""
    step = 3
    launcher, workers = held_torchrun(tmp_path, step, RELEASE_WITHOUT_STOPPING)
    os.kill(workers[signalled], signal.SIGTERM)
    os.kill(workers[1 - signalled], signal.SIGUSR1)  # released: it carries on unless told to stop
    assert launcher.wait() != 0  # torchrun reports its workers' 143
    assert "SIGTERM: stopped after step 3, checkpoint " in launcher.stderr, launcher.stderr[-3000:]
    checkpoints = sorted(path.name for path in (tmp_path / "run" / "checkpoints").glob("step-*.pt"))
    assert checkpoints[-1] == f"step-{step:08d}.pt"  # both stopped there: no later step was taken
    assert all(ended_in_time(pid, limit=120) for pid in workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_torchrun_launcher_leaves_no_worker_training(tmp_path):
    """torchrun starts each worker in a process group of its own, so SIGKILL to the launcher (as a
    job's shell or a careless kill sends it) would leave both ranks training on. Each worker asks
    the kernel for a signal when its launcher dies: both stop after the step they are at, write its
    checkpoint, and end. The launcher has threads, so each worker hears of its death more than once."""
    step = 3
    launcher, workers = held_torchrun(tmp_path, step)
    os.kill(launcher.popen.pid, signal.SIGKILL)  # the launcher alone: its workers are not in its group
    launcher.popen.wait()
    still_training = [pid for pid in workers if not ended_in_time(pid, limit=120)]
    assert still_training == [], f"workers still training after their launcher was killed: {still_training}"
    assert (tmp_path / "run" / "checkpoints" / f"step-{step:08d}.pt").exists()  # they stopped cleanly
