"""The proof that runs repeat: one seed, two fresh processes, the same weights bit for bit and the
same metrics.csv, every step's loss and every evaluation; another seed, other weights and losses.

Fresh processes, as a user reruns: a match cannot come from state shared inside one process. The
two runs of one seed are launched from "shells" with other PYTHONHASHSEED values, and the weights
are compared by the sha256 of their state_dict, not by a tolerance. Then what the match rests on:
each run hashed strings with its own seed and used its recorded thread count, whatever the shell
and the machine said, and metrics.csv holds every bit of each figure. This file needs nothing else
of the tests: it is the whole proof.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "{{ cookiecutter.project_slug }}"
SRC = Path(__file__).resolve().parents[1] / "src"
SHORT = ("--epochs", "2", "--device", "cpu", "--max-samples", "128", "--batch-size", "16")


def train_in_fresh_processes(root: Path, runs: dict[str, tuple[int, str]]) -> dict[str, dict]:
    """`python -m <package>.train --seed SEED` for each run (seed, the shell's PYTHONHASHSEED), all
    at once, each a process of its own; each run's weights hash and metrics.csv, as written."""
    started = {}
    for name, (seed, hash_seed) in runs.items():
        env = {**os.environ, "PYTHONHASHSEED": hash_seed,
               "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)}
        with open(root / f"{name}.err", "w") as err:  # a file, not a pipe: a full pipe would block the run
            started[name] = subprocess.Popen(
                [sys.executable, "-m", f"{PACKAGE}.train", "--seed", str(seed), "--out", str(root / name), *SHORT],
                stdout=subprocess.DEVNULL, stderr=err, env=env)
    results = {}
    for name, process in started.items():
        assert process.wait(timeout=600) == 0, (root / f"{name}.err").read_text()[-3000:]
        files = {file: json.loads((root / name / f"{file}.json").read_text(encoding="utf-8"))
                 for file in ("config", "environment", "summary")}
        results[name] = {"weights": files["summary"]["weights_sha256"],
                         "metrics": (root / name / "metrics.csv").read_text(encoding="utf-8"), **files}
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    return train_in_fresh_processes(tmp_path_factory.mktemp("two_runs"),
                                    {"first": (7, "0"), "second": (7, "123"), "other_seed": (8, "0")})


def test_one_seed_in_two_fresh_processes_gives_the_same_weights_and_every_metrics_row(runs):
    assert runs["first"]["weights"] == runs["second"]["weights"]  # sha256 of every tensor's bytes
    assert runs["first"]["metrics"] == runs["second"]["metrics"]  # every row, every digit
    assert len(runs["first"]["metrics"].splitlines()) > 3  # a header, steps and evaluations: not an empty file


def test_another_seed_gives_other_weights_and_other_losses(runs):
    """The negative control: without it, the test above could pass by never changing anything."""
    assert runs["other_seed"]["weights"] != runs["first"]["weights"]
    assert runs["other_seed"]["metrics"] != runs["first"]["metrics"]


def test_each_run_hashed_strings_with_its_seed_whatever_the_shell_said(runs):
    """Python reads PYTHONHASHSEED once, as it starts: the run starts again with it set from --seed
    (a set of strings then iterates in one order), and records what its interpreter started with."""
    for run in runs.values():
        started, seed = run["environment"]["python_hash_seed"], str(run["config"]["seed"])
        assert started == seed, f"the interpreter of the run of seed {seed} started with PYTHONHASHSEED={started}"


def test_each_run_used_the_thread_count_it_records_not_the_machines(runs):
    """torch's default is one thread per core; a sum split over another number of threads adds up
    in another order. (On a one-core machine the default is the recorded 1: this cannot fail there.)"""
    for run in runs.values():
        used, configured = run["environment"]["intra_op_threads"], run["config"]["threads"]
        assert used == configured, f"the run configured {configured} thread(s) and computed with {used}"


def test_metrics_csv_keeps_every_bit_its_last_row_is_the_summarys_final_figures(runs):
    """Each figure is written as repr() of the float, which gives back the very same float: a file
    that rounded would hide from every comparison above the drift it is meant to catch."""
    for run in runs.values():
        header, *_, last = (line.split(",") for line in run["metrics"].splitlines())
        assert last[2] == "val"
        figures = [name for name in header if f"val_{name}" in run["summary"]]  # loss and the task's metrics
        assert "loss" in figures
        for name in figures:
            written, final = last[header.index(name)], run["summary"][f"val_{name}"]
            assert float(written) == final, f"metrics.csv holds {name} as {written}, the run's figure is {final!r}"
