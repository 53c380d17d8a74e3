"""Specifications of exact resume: a run killed at any step, resumed, equals the run never stopped.

The reference is runs["seed7_3_epochs"] (25 steps an epoch, a checkpoint every 4 steps). Each
interrupted run is the same command, killed as soon as a chosen checkpoint is on disk.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }}.train import main

from conftest import FAST, read_run, start_module

ARGS = (*FAST, "--seed", "7", "--epochs", "3")


def interrupt_all(root: Path, plans: dict[str, tuple[int, signal.Signals, tuple[str, ...]]]) -> dict:
    """Starts one run per plan, all at once; sends each its signal as soon as the checkpoint of its
    step is on disk; returns each run's (exit status, stderr)."""
    processes = {name: start_module("train", "--out", str(root / name), *ARGS, *extra)
                 for name, (_, _, extra) in plans.items()}
    waiting = dict(plans)
    deadline = time.monotonic() + 300
    while waiting and time.monotonic() < deadline:
        for name, (step, sig, _) in list(waiting.items()):
            if (root / name / "checkpoints" / f"step-{step:08d}.pt").exists() or processes[name].poll() is not None:
                processes[name].send_signal(sig)
                del waiting[name]
        time.sleep(0.002)
    stopped = {}
    for name, process in processes.items():
        _, stderr = process.communicate(timeout=300)
        assert not (root / name / "summary.json").exists(), f"{name} finished before it could be interrupted"
        stopped[name] = (process.returncode, stderr)
    return stopped


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """Interrupts runs in several ways, then resumes them all at once (one process each)."""
    root = tmp_path_factory.mktemp("interrupted")
    stopped = interrupt_all(root, {
        # after the 2nd checkpoint: step 8 of 25, mid-epoch
        "sigkill": (8, signal.SIGKILL, ()),
        # after step 32: mid-way through the second epoch, with loader workers
        "sigkill_workers2": (32, signal.SIGKILL, ("--num-workers", "2")),
        "sigterm": (8, signal.SIGTERM, ()),
    })
    # The run killed with workers also gets its newest checkpoint cut in half, as by a full disk:
    # its resume must warn, fall back to the checkpoint before, and still end exactly equal.
    newest = sorted((root / "sigkill_workers2" / "checkpoints").glob("step-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])

    processes = {name: start_module("train", "--out", str(root / name), "--resume",
                                    *(("--num-workers", "2") if "workers2" in name else ()))
                 for name in ("sigkill", "sigkill_workers2", "sigterm")}
    resumed = {}
    for name, process in processes.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, f"{name}: {stderr}"
        resumed[name] = (read_run(root / name), stderr)
    return stopped, resumed, newest


@pytest.mark.parametrize("name", ["sigkill", "sigkill_workers2", "sigterm"])
def test_a_resumed_run_has_the_weights_and_every_metrics_row_of_the_run_never_stopped(name, interrupted, runs):
    _, resumed, _ = interrupted
    run, _ = resumed[name]
    reference = runs["seed7_3_epochs"]
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
    _, resumed, newest = interrupted
    _, stderr = resumed["sigkill_workers2"]
    assert f"skipping damaged checkpoint {newest}" in stderr


def test_every_checkpoint_loads_with_weights_only(interrupted):
    import torch

    stopped_run, _ = interrupted[1]["sigterm"]
    for path in (stopped_run.out / "checkpoints").glob("step-*.pt"):
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
    copy = shutil.copytree(run.out, tmp_path / "copy")
    (copy / "summary.json").unlink()  # make it look interrupted again
    err = refused(["--out", str(copy), "--resume", "--seed", "8", "--batch-size", "32"], capsys)
    assert "seed (recorded 7, given 8)" in err and "batch_size (recorded 64, given 32)" in err


def test_resume_where_no_checkpoint_is_intact_is_refused(interrupted, tmp_path, capsys):
    run, _ = interrupted[1]["sigkill"]
    copy = shutil.copytree(run.out, tmp_path / "copy")
    (copy / "summary.json").unlink()
    for path in (copy / "checkpoints").glob("step-*.pt"):
        path.write_bytes(b"not a checkpoint")
    assert "no intact checkpoint" in refused(["--out", str(copy), "--resume"], capsys)


def test_resume_where_there_is_no_run_is_refused(tmp_path, capsys):
    assert "holds no run to resume" in refused(["--out", str(tmp_path), "--resume"], capsys)


def test_a_new_run_into_an_interrupted_one_is_refused_and_points_to_resume(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert "--resume" in refused(["--out", str(tmp_path)], capsys)
