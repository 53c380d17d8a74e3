"""Specifications of exact resume: a run killed at any step, resumed, equals the run never stopped.

The reference is runs["seed7"] (2 epochs of 25 steps, a checkpoint every 4 steps). Each
interrupted run (INTERRUPTIONS) is the same command, stopped as soon as a chosen
checkpoint is on disk, then resumed with --resume in a fresh process.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }}.train import main

from conftest import FAST, read_run, start_module

ARGS = (*FAST, "--seed", "7")

# Runs stopped in the middle, then resumed: (checkpoint step after which the signal goes, the
# signal, extra flags, whether the newest checkpoint is then cut in half as by a full disk).
INTERRUPTIONS = {
    "sigkill": (8, signal.SIGKILL, (), False),  # after the 2nd checkpoint, mid-epoch
    # mid-way through the second epoch, with loader workers, and a damaged newest checkpoint
    "sigkill_workers2": (28, signal.SIGKILL, ("--num-workers", "2"), True),
    "sigterm": (8, signal.SIGTERM, (), False),
}


def newest_checkpoint_step(run: Path) -> int:
    """The step of the newest checkpoint on disk (0 for none). Not "is step k there": only the last
    three are kept, so on a busy machine step k's may be gone before the test looks."""
    return max((int(path.stem.split("-")[1]) for path in (run / "checkpoints").glob("step-*.pt")), default=0)


def interrupt_and_resume(root: Path, plans: dict) -> tuple[dict, dict, dict]:
    """Starts one run per plan, all at once. Sends each its signal as soon as a checkpoint of its
    step or later is on disk; once it has stopped, damages its newest checkpoint if the plan says so, and
    starts `--resume` at once. Returns (stopped, resumed, damaged): each run's exit status and
    stderr when stopped, its resumed Run and stderr, and the damaged file."""
    processes = {name: start_module("train", "--out", str(root / name), *ARGS, *extra)
                 for name, (_, _, extra, _) in plans.items()}
    signalled, stopped, resumers, damaged = set(), {}, {}, {}
    deadline = time.monotonic() + 300
    while len(resumers) < len(plans) and time.monotonic() < deadline:
        for name, (step, sig, extra, damage) in plans.items():
            process = processes[name]
            if name not in signalled and (newest_checkpoint_step(root / name) >= step or process.poll() is not None):
                process.send_signal(sig)
                signalled.add(name)
            elif name in signalled and name not in resumers and process.poll() is not None:
                stopped[name] = (process.returncode, process.communicate()[1])
                assert not (root / name / "summary.json").exists(), f"{name} finished before it was interrupted"
                if damage:
                    newest = sorted((root / name / "checkpoints").glob("step-*.pt"))[-1]
                    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
                    damaged[name] = newest
                resumers[name] = start_module("train", "--out", str(root / name), "--resume", *extra)
        time.sleep(0.002)
    resumed = {}
    for name, process in resumers.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, f"{name}: {stderr}"
        resumed[name] = (read_run(root / name), stderr)
    return stopped, resumed, damaged



@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    return interrupt_and_resume(tmp_path_factory.mktemp("interrupted"), INTERRUPTIONS)


@pytest.mark.parametrize("name", ["sigkill", "sigkill_workers2", "sigterm"])
def test_a_resumed_run_has_the_weights_and_every_metrics_row_of_the_run_never_stopped(name, interrupted, runs):
    _, resumed, _ = interrupted
    run, stderr = resumed[name]
    assert "another environment" not in stderr  # the same machine and stack: no warning
    reference = runs["seed7"]
    assert run.metrics == reference.metrics  # no row lost, torn or written twice
    assert run.weights == reference.weights


def test_sigterm_finishes_the_step_writes_a_checkpoint_and_says_how_to_resume(interrupted):
    stopped, _, _ = interrupted
    returncode, stderr = stopped["sigterm"]
    assert returncode == 128 + signal.SIGTERM
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "SIGTERM" in lines[0] and "--resume" in lines[0]
    assert "Traceback" not in stderr


def test_a_truncated_newest_checkpoint_is_named_in_a_warning_and_skipped(interrupted):
    _, resumed, damaged = interrupted
    _, stderr = resumed["sigkill_workers2"]
    assert f"skipping damaged checkpoint {damaged['sigkill_workers2']}" in stderr


def test_every_checkpoint_loads_with_weights_only(interrupted):
    import torch

    stopped_run, _ = interrupted[1]["sigterm"]
    for path in (stopped_run.path / "checkpoints").glob("step-*.pt"):
        state = torch.load(path, weights_only=True)
        assert {"model", "optimizer", "scheduler", "rng", "epoch", "batch", "step", "config",
                "format_version"} <= state.keys()


def refused(argv: list[str], capsys) -> str:
    """Runs main(argv), expects exit 2 with one error line (after any warnings), returns that line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("warning: ") for line in lines[:-1]) and "Traceback" not in lines[-1]
    return lines[-1]


def test_resume_with_other_settings_is_refused_listing_them(interrupted, tmp_path, capsys):
    run, _ = interrupted[1]["sigkill"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()  # make it look interrupted again
    err = refused(["--out", str(copy), "--resume", "--seed", "8", "--batch-size", "32"], capsys)
    assert "seed (recorded 7, given 8)" in err and "batch_size (recorded 64, given 32)" in err


def test_resuming_in_another_environment_warns_and_names_what_changed(interrupted, tmp_path, capsys):
    run, _ = interrupted[1]["sigkill"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()
    environment = json.loads((copy / "environment.json").read_text())
    environment["torch"] = "1.0.0"  # as if the run had started on another software stack
    (copy / "environment.json").write_text(json.dumps(environment))
    assert main(["--out", str(copy), "--resume"]) == 0  # in this process: resumes all the same
    err = capsys.readouterr().err
    assert "warning: resuming in another environment (torch: '1.0.0' ->" in err


def test_resume_where_no_checkpoint_is_intact_is_refused(interrupted, tmp_path, capsys):
    run, _ = interrupted[1]["sigkill"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()
    for path in (copy / "checkpoints").glob("step-*.pt"):
        path.write_bytes(b"not a checkpoint")
    assert "no intact checkpoint" in refused(["--out", str(copy), "--resume"], capsys)


def test_resume_where_there_is_no_run_is_refused(tmp_path, capsys):
    assert "holds no run (config.json is missing)" in refused(["--out", str(tmp_path), "--resume"], capsys)


def test_a_new_run_into_an_interrupted_one_is_refused_and_points_to_resume(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert "--resume" in refused(["--out", str(tmp_path)], capsys)
