"""Specifications of a study across a cluster: slurm/study.sbatch, run here as SLURM would run it
for two array tasks (SLURM's variables set by the test, `srun` a stand-in that runs its command),
then `study --summarise` over the seed folders it wrote, training nothing again.

Selected with `pytest -m distributed`, with the torchrun tests: it trains three short runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }} import study

from conftest import BATCH, SAMPLES, once, python_env, read_run, start, value_of

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).resolve().parents[1] / "slurm" / "study.sbatch"
FLAGS = ("--epochs", "1", "--device", "cpu", "--checkpoint-every", "2", "--max-samples", str(SAMPLES),
         "--batch-size", str(BATCH))


def array_task(root: Path, task_id: int, *flags: str, log: str):
    """The script's body for one array task, in `root` as the job's working folder (where it
    writes studies/<job name>/)."""
    bin_folder = root / "bin"
    if not bin_folder.exists():
        bin_folder.mkdir()
        for name, command in (("srun", '"$@"'), ("python", f'"{sys.executable}" "$@"')):
            (bin_folder / name).write_text(f"#!/bin/sh\nexec {command}\n")  # srun runs its one task
            (bin_folder / name).chmod(0o755)  # and `python` is this interpreter
    env = python_env(PATH=f"{bin_folder}{os.pathsep}{os.environ['PATH']}", SLURM_ARRAY_TASK_ID=str(task_id),
                     SLURM_ARRAY_JOB_ID="4242", SLURM_JOB_ID=str(4243 + task_id), SLURM_JOB_NAME="lr-test")
    return start(["bash", str(SCRIPT), *FLAGS, *flags], root / log, env=env, cwd=root)  # the job's folder


def run_array(root: Path) -> dict:
    """Tasks 0 and 1 at once, task 0 preempted after 3 steps (as --stop-after-steps does); then
    task 0 requeued with the same command line, as SLURM does."""
    first = {0: array_task(root, 0, "--stop-after-steps", "3", log="task0.log"),
             1: array_task(root, 1, log="task1.log")}
    codes = {task_id: process.wait() for task_id, process in first.items()}
    stopped_steps = len(read_run(root / "studies" / "lr-test" / "seed-0").train_losses)
    requeued = array_task(root, 0, "--stop-after-steps", "3", log="task0-requeued.log")
    codes["requeued"] = requeued.wait()
    assert all(code == 0 for code in codes.values()), f"{codes}: {requeued.stderr[-2000:]}"
    return {"root": root, "stopped_steps": stopped_steps, "requeued_log": requeued.stdout}


@pytest.fixture(scope="module")
def array_or_failure(tmp_path_factory):
    return once(lambda: run_array(tmp_path_factory.mktemp("cluster")))


@pytest.fixture
def array(array_or_failure, request):
    return value_of(array_or_failure, request)


def test_each_array_task_trains_its_own_seed_into_the_study_folder(array):
    folder = array["root"] / "studies" / "lr-test"
    runs = {seed: read_run(folder / f"seed-{seed}") for seed in (0, 1)}
    assert {seed: run.config["seed"] for seed, run in runs.items()} == {0: 0, 1: 1}
    assert all(run.summary is not None for run in runs.values())
    assert runs[0].weights != runs[1].weights


def test_a_requeued_array_task_resumes_its_run(array):
    assert array["stopped_steps"] == 3  # the first attempt was preempted after 3 steps
    assert "resuming from " in array["requeued_log"]
    run = read_run(array["root"] / "studies" / "lr-test" / "seed-0")
    assert len(run.train_losses) == run.summary["steps"] > 3  # then it finished, every step once


def test_study_summarises_the_seeds_trained_by_the_array_without_training(array, capsys):
    folder = array["root"] / "studies" / "lr-test"
    before = {path: path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}
    assert study.main(["--seeds", "0-1", "--out", str(folder), "--summarise"]) == 0
    recorded = json.loads((folder / "study.json").read_text())
    assert [row["weights_sha256"] for row in recorded["runs"]] == [
        read_run(folder / f"seed-{seed}").weights for seed in (0, 1)]
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in before.items())  # no run touched
    assert not (folder / "logs").exists()  # nothing was launched
    assert "95 % confidence interval" in capsys.readouterr().out
