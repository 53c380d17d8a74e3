"""Shared helpers: run the training script in fresh processes, exactly as a user reruns it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }}.runs import Run, read_run
from {{ cookiecutter.project_slug }}.utils.repro import configure_determinism

PACKAGE = "{{ cookiecutter.project_slug }}"
SRC = Path(__file__).resolve().parents[1] / "src"
# Short runs keep the suite fast; two epochs still cover shuffling across epochs and evaluation.
# Checkpointing every 4 steps changes no result, and gives the resume tests checkpoints to use.
FAST = ("--epochs", "2", "--device", "cpu", "--checkpoint-every", "4")


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


def start_module(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", f"{PACKAGE}.{module}", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or python_env(),
    )


def train_many(root: Path, runs: dict[str, tuple[tuple[str, ...], dict]]) -> dict[str, Run]:
    """Starts one fresh `python -m <package>.train` per entry (flags, environment changes), all at
    once, and reads each run."""
    processes = {name: start_module("train", "--out", str(root / name), *FAST, *args, env=python_env(**env))
                 for name, (args, env) in runs.items()}
    results = {}
    for name, process in processes.items():
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, f"run {name} failed:\n{stderr}"
        results[name] = read_run(root / name)
    return results


# The runs that the specifications compare, each in its own process, so that a match cannot come
# from sharing one. The two plain seed-7 runs are launched from "shells" with different
# PYTHONHASHSEED values.
RUNS = {
    "seed7": (("--seed", "7"), {"PYTHONHASHSEED": None}),
    "seed7_again": (("--seed", "7"), {"PYTHONHASHSEED": "123"}),
    "seed7_workers2": (("--seed", "7", "--num-workers", "2"), {}),
    # Two invariances in one run, to keep the suite fast: a mismatch would fail the test of each.
    "seed7_workers3_eval_never": (("--seed", "7", "--num-workers", "3", "--eval-every", "0"), {}),
    "seed7_workers2_persistent": (("--seed", "7", "--num-workers", "2", "--persistent-workers",
                                   "--prefetch-factor", "4"), {}),
    "seed7_threads2": (("--seed", "7", "--epochs", "1", "--threads", "2"), {}),
    "seed8": (("--seed", "8"), {}),
}


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    return train_many(tmp_path_factory.mktemp("runs"), RUNS)
