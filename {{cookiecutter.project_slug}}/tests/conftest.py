"""Shared helpers: run the training script in fresh processes, exactly as a user reruns it.

Nothing here races the clock. Each run is its own process group (so a kill reaches its loader
workers too) and writes its output to files (so no pipe can block it); a test waits for a state
on disk, never for "long enough", and its time limits only stop a run that hangs.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from {{ cookiecutter.project_slug }}.engine.runs import Run, read_run
from {{ cookiecutter.project_slug }}.utils.repro import configure_determinism

PACKAGE = "{{ cookiecutter.project_slug }}"
SRC = Path(__file__).resolve().parents[1] / "src"
# Short runs keep the suite fast whatever the task: --max-samples and --batch-size are the suite's
# own, not task.py's or config.py's defaults. Two epochs still cover shuffling across epochs and
# evaluation; checkpointing every 4 steps changes no result, and gives the resume tests checkpoints.
SAMPLES, BATCH = 128, 16
FAST = ("--epochs", "2", "--device", "cpu", "--checkpoint-every", "4", "--max-samples", str(SAMPLES),
        "--batch-size", str(BATCH))
HANG = 900  # seconds after which a run counts as hung (a 2-epoch run takes a few seconds)


@functools.cache
def steps_per_epoch() -> int:
    """Optimizer steps in one epoch of a FAST run of this project's task (a test picks its steps from
    it, never from a constant that holds for one dataset only)."""
    from {{ cookiecutter.project_slug }} import task
    from {{ cookiecutter.project_slug }}.config import Config

    train_set, _ = task.make_datasets(Config())
    return math.ceil(min(len(train_set), SAMPLES) / BATCH)


@contextmanager
def determinism_left_as_found() -> Iterator[None]:
    """For code that configures determinism in the test process itself (the repro tests, main or
    doctor run in-process): afterwards PyTorch's defaults are back, and so is the cuBLAS variable,
    which every child process would otherwise inherit and record in its environment.json."""
    saved = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        yield
    finally:
        configure_determinism("off")
        if saved is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved


@pytest.fixture(autouse=True)
def leave_determinism_as_found() -> Iterator[None]:
    with determinism_left_as_found():
        yield


def python_env(**changes: str | None) -> dict[str, str]:
    """The environment for a child interpreter: ours, with src/ importable even without install,
    and `changes` applied (None removes a variable)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@dataclass
class Process:
    """A child process in its own process group, its stdout and stderr in files."""

    popen: subprocess.Popen
    log: Path

    @property
    def stdout(self) -> str:
        return self.log.with_suffix(".out").read_text()

    @property
    def stderr(self) -> str:
        return self.log.with_suffix(".err").read_text()

    def wait(self) -> int:
        """The exit status; a hung process (and its workers) is killed and reported."""
        try:
            return self.popen.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            self.kill_group(signal.SIGKILL)
            self.popen.wait()
            raise AssertionError(f"{self.log.name} hung for {HANG} s; stderr:\n{self.stderr[-3000:]}") from None

    def kill_group(self, signum: int) -> None:
        try:
            os.killpg(self.popen.pid, signum)
        except ProcessLookupError:
            pass


def start(command: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> Process:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        popen = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
                                 env=env or python_env(), start_new_session=True, cwd=cwd)
    return Process(popen, log)


def start_module(module: str, *args: str, log: Path, env: dict[str, str] | None = None) -> Process:
    return start([sys.executable, "-m", f"{PACKAGE}.{module}", *args], log, env)


def wait_until(condition, process: Process, what: str) -> None:
    """Waits for `condition()` as long as `process` runs: a state, not a duration."""
    while not condition():
        if process.popen.poll() is not None:
            raise AssertionError(f"{process.log.name} ended before {what}; stderr:\n{process.stderr[-3000:]}")
        time.sleep(0.02)


# The real training code, held at a chosen step: once that step's sums are handed to the metrics
# rows, it writes a marker file and waits in signal.pause() for the test's signal. So the signal
# arrives at the step the test chose, however fast or loaded the machine is. The harness helps the
# run in no other way: it flushes nothing, so rows that a run has not put on disk are lost to a kill,
# as they would be to a real one. PRELUDE is code to run first (a test's own task, say).
HELD_AT_STEP = """
import os, signal, sys
from pathlib import Path
{prelude}
from {package}.engine.loop import StepRows
from {package}.train import main

step, marker, add = int(sys.argv[1]), Path(sys.argv[2]), StepRows.add
if "RANK" in os.environ:  # under torchrun, one marker per rank
    marker = marker.with_name(marker.name + "." + os.environ["RANK"])

def add_then_hold(rows, epoch, at_step, sums):
    add(rows, epoch, at_step, sums)
    if at_step == step:
        partial = marker.with_name(marker.name + ".partial")
        partial.write_text(str(os.getpid()))
        os.replace(partial, marker)  # whole or absent: the test reads the process id in it
        signal.pause()  # returns after a signal handler ran (SIGTERM); SIGKILL ends the process here

StepRows.add = add_then_hold
sys.exit(main(sys.argv[3:]))
"""


# test_resume.py, test_settings.py, test_precision.py and test_distributed.py each spell out
# "start held, wait for the marker, signal or kill the group, wait, resume" rather than call one
# helper that does it all: each varies a different part (the signal, when it comes, what is killed,
# how many runs at once, which flags the resume gets), and a reader of a resume test should see in
# the test's own module exactly which interruption the proof is about.
def held_at_step_code(prelude: str = "") -> str:
    return HELD_AT_STEP.format(package=PACKAGE, prelude=prelude)


def start_held_at(step: int, run: Path, *args: str, hash_seed: str, prelude: str = "") -> tuple[Process, Path]:
    """`train ARGS` (which must include --out run), held after step `step`; returns the process and
    the marker file that appears once it is held. Started with -c, so the package does not
    relaunch itself: pass the hash seed it would set."""
    marker = run.parent / f"{run.name}.held"
    process = start([sys.executable, "-c", held_at_step_code(prelude), str(step), str(marker), *args],
                    run.parent / f"{run.name}-stopped.log", env=python_env(PYTHONHASHSEED=hash_seed))
    return process, marker


def training_steps(model, loader, state, config, device: torch.device | None = None):
    """One epoch's steps from `state`'s position, taken as train.py's train_epochs takes them (train
    mode, the epoch's order, --accumulate micro-batches a step, train.train_step): yields each
    step's sums. For tests that drive the steps in this process."""
    from {{ cookiecutter.project_slug }}.engine.loop import accumulation_windows
    from {{ cookiecutter.project_slug }}.train import train_step

    model.train()
    loader.sampler.set_epoch(state.epoch, start=state.epoch_step * config.batch_size)
    for micro_batches in accumulation_windows(loader, config.accumulate):
        yield train_step(model, micro_batches, state, config, device or torch.device("cpu"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


TORCHRUN = (sys.executable, "-m", "torch.distributed.run")


def torchrun(processes: int, *program: str) -> list[str]:
    """`torchrun --standalone --nproc_per_node=N PROGRAM`: one machine, a free port of its own."""
    return [*TORCHRUN, "--standalone", f"--nproc_per_node={processes}", *program]


def two_nodes(root: Path, name: str, program: list[str], env=None) -> list[Process]:
    """Two torchrun agents on this machine, as two nodes of one process each, meeting through
    c10d rendezvous on 127.0.0.1: the commands the README gives for two machines. `program`:
    `-m <package>.train` or a script, then its arguments but --out (root / name)."""
    agent = [*TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", name]
    return [start([*agent, *program, "--out", str(root / name)], root / f"{name}-node{node}.log", env=env)
            for node in (0, 1)]


def train_many(root: Path, runs: dict[str, tuple[tuple[str, ...], dict]]) -> dict[str, Run]:
    """Starts one fresh `python -m <package>.train` per entry (flags, environment changes), all at
    once, and reads each run."""
    processes = {name: start_module("train", "--out", str(root / name), *FAST, *args, log=root / f"{name}.log",
                                    env=python_env(**env))
                 for name, (args, env) in runs.items()}
    for name, process in processes.items():
        assert process.wait() == 0, f"run {name} failed:\n{process.stderr[-3000:]}"
    return {name: read_run(root / name) for name in runs}


# A draw from each global generator, for a dataset made to draw from one of them.
DRAW = {"random": lambda n: random.randrange(n), "numpy": lambda n: int(np.random.randint(n)),
        "torch": lambda n: int(torch.randint(n, ()))}


class DrawsFrom:
    """The task's training set, made to draw from one global generator and to declare `draws_from`:
    sample i is one of its first samples (fetched once) chosen at random, whatever the task's
    samples are. Anything else (what make_model reads) comes from the task's training set."""

    def __init__(self, dataset, generator: str, draws_from: tuple[str, ...], samples: int = SAMPLES) -> None:
        self.dataset, self.generator, self.draws_from = dataset, generator, draws_from
        self.samples = [dataset[index] for index in range(min(samples, len(dataset)))]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        return self.samples[(index + DRAW[self.generator](len(self.samples))) % len(self.samples)]

    def __getattr__(self, name: str):
        return getattr(self.__dict__["dataset"], name)


class SetUpFailure:
    """A shared set-up that failed: the first test that needs it fails with the error, the others
    skip and name that test. One report, not the same traceback once per test."""

    def __init__(self, error: BaseException) -> None:
        self.message = f"{type(error).__name__}: {error}"
        self.reported_by: str | None = None

    def report(self, request: pytest.FixtureRequest) -> None:
        if self.reported_by is not None:
            pytest.skip(f"its set-up failed; see {self.reported_by}")
        self.reported_by = request.node.nodeid
        pytest.fail(f"set-up failed: {self.message}", pytrace=False)


def once(make):
    """Runs make() and keeps its value, or the failure to report once."""
    try:
        return make()
    except Exception as error:  # any failure of a set-up is reported, once, by a test
        return SetUpFailure(error)


def value_of(result, request: pytest.FixtureRequest):
    if isinstance(result, SetUpFailure):
        result.report(request)
    return result


# The runs that the specifications compare, each in its own process, so that a match cannot come
# from sharing one. The two plain seed-7 runs are launched from "shells" with different
# PYTHONHASHSEED values.
# TensorBoard is an optional extra (pip install -e ".[tensorboard]"; the CI workflow installs it):
# without it, the run below leaves --tensorboard out and the tracking tests skip, saying why.
TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
RUNS = {
    "seed7": (("--seed", "7"), {"PYTHONHASHSEED": None}),
    "seed7_again": (("--seed", "7"), {"PYTHONHASHSEED": "123"}),
    # Four invariances in one run, to keep the suite fast: a mismatch would fail the test of each.
    "seed7_workers3_eval_never": (("--seed", "7", "--num-workers", "3", "--eval-every", "0", "--log-every", "1",
                                   *(("--tensorboard",) if TENSORBOARD else ())), {}),
    "seed7_workers2_persistent": (("--seed", "7", "--num-workers", "2", "--persistent-workers",
                                   "--prefetch-factor", "4"), {}),
    "seed7_threads2": (("--seed", "7", "--epochs", "1", "--threads", "2"), {}),
    "seed8": (("--seed", "8"), {}),
}


@pytest.fixture(scope="session")
def all_runs(tmp_path_factory: pytest.TempPathFactory):
    return once(lambda: train_many(tmp_path_factory.mktemp("runs"), RUNS))


@pytest.fixture
def runs(all_runs, request) -> dict[str, Run]:
    return value_of(all_runs, request)
