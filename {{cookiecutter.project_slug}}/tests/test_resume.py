"""Specifications of exact resume: a run killed at any step, resumed, equals the run never stopped.

The reference is runs["seed7"] (2 FAST epochs of this project's task, a checkpoint every 4 steps).
Each interrupted run (interruptions()) is the same command, held at a chosen step and signalled
there, then resumed with --resume in a fresh process.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }}.train import main

from conftest import FAST, read_run, start_held_at, start_module, steps_per_epoch, value_of, wait_until

ARGS = (*FAST, "--seed", "7")
INTERRUPTIONS = ("sigkill_workers2", "sigterm")


def interruptions() -> dict:
    """Runs stopped in the middle, then resumed: (the step at which the run is held and signalled,
    the signal, extra flags). With a checkpoint every 4 steps, a kill two steps after one loses
    those two: the resumed run must cut their rows from metrics.csv and train them again. SIGKILL
    goes to the whole process group, loader workers too, as a scheduler's kill does."""
    per_epoch = steps_per_epoch()
    mid_second = per_epoch + per_epoch // 2 + (1 if (per_epoch + per_epoch // 2) % 4 == 0 else 0)
    return {
        "sigkill_workers2": (min(6, per_epoch - 1), signal.SIGKILL, ("--num-workers", "2")),  # mid-epoch, workers
        "sigterm": (mid_second, signal.SIGTERM, ()),  # mid-way through the second epoch: checkpoints, exits 143
    }

def start_held(run: Path, step: int, extra: tuple[str, ...]):
    return start_held_at(step, run, "--out", str(run), *ARGS, *extra, hash_seed="7")


def interrupt_and_resume(root: Path, plans: dict) -> tuple[dict, dict]:
    """Starts one run per plan, all at once; holds each at its step, signals it, waits for it to
    end, then resumes them all with --resume. Returns (stopped, resumed): each run's exit status
    and stderr when stopped, and its resumed Run and stderr."""
    held = {name: start_held(root / name, step, extra) for name, (step, _, extra) in plans.items()}
    stopped = {}
    for name, (process, marker) in held.items():
        wait_until(marker.exists, process, f"reaching step {plans[name][0]}")
        sig = plans[name][1]
        process.kill_group(sig) if sig == signal.SIGKILL else process.popen.send_signal(sig)
        stopped[name] = (process.wait(), process.stderr)
        process.kill_group(signal.SIGKILL)  # no worker outlives its run
        assert not (root / name / "summary.json").exists(), f"{name} finished before it was interrupted"
    resumers = {name: start_module("train", "--out", str(root / name), "--resume", *plans[name][2],
                                   log=root / f"{name}-resumed.log") for name in plans}
    resumed = {}
    for name, process in resumers.items():
        assert process.wait() == 0, f"{name}: {process.stderr}"
        resumed[name] = (read_run(root / name), process.stderr)
    return stopped, resumed


@pytest.fixture(scope="module")
def interrupted_or_failure(tmp_path_factory):
    from conftest import once

    return once(lambda: interrupt_and_resume(tmp_path_factory.mktemp("interrupted"), interruptions()))


@pytest.fixture
def interrupted(interrupted_or_failure, request):
    return value_of(interrupted_or_failure, request)


@pytest.mark.parametrize("name", INTERRUPTIONS)
def test_a_resumed_run_has_the_weights_and_every_metrics_row_of_the_run_never_stopped(name, interrupted, runs):
    _, resumed = interrupted
    run, stderr = resumed[name]
    assert "another environment" not in stderr  # the same machine and stack: no warning
    reference = runs["seed7"]
    pairs = zip(run.metrics, reference.metrics, strict=False)  # a missing row: the comparison below
    parted = next((number for number, (one, other) in enumerate(pairs) if one != other), None)
    assert parted is None, (f"the resumed run parts from the one never stopped at step {run.metrics[parted]['step']} "
                            f"({run.metrics[parted]['split']}): resumed {run.metrics[parted]}, never stopped "
                            f"{reference.metrics[parted]}")
    assert run.metrics == reference.metrics  # no row lost, torn or written twice
    assert run.weights == reference.weights


@pytest.mark.parametrize("name", INTERRUPTIONS)
def test_a_kill_at_any_instant_never_leaves_a_damaged_checkpoint(name, interrupted):
    """Checkpoints are written to a temporary file and renamed: the resumed run met none torn."""
    _, resumed = interrupted
    _, stderr = resumed[name]
    assert "skipping damaged checkpoint" not in stderr


def test_sigterm_finishes_the_step_writes_a_checkpoint_and_says_how_to_resume(interrupted):
    stopped, _ = interrupted
    returncode, stderr = stopped["sigterm"]
    step = interruptions()["sigterm"][0]
    assert returncode == 128 + signal.SIGTERM
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and f"SIGTERM: stopped after step {step}, checkpoint " in lines[0] and "--resume" in lines[0]
    assert "Traceback" not in stderr


@pytest.mark.parametrize("start_method, workers", [(None, 0), ("fork", 2), ("spawn", 2)])
def test_ctrl_c_finishes_the_step_writes_its_checkpoint_and_says_how_to_resume(start_method, workers, tmp_path):
    """Ctrl-C in a terminal sends SIGINT to the whole process group, as the test does: to the loader's
    workers too, whichever way they were started (spawn is macOS's and Windows' way)."""
    run = tmp_path / "interrupted"
    prelude = (f"import multiprocessing; multiprocessing.set_start_method({start_method!r}, force=True)"
               if start_method else "")
    process, marker = start_held_at(3, run, "--out", str(run), *ARGS, "--num-workers", str(workers), hash_seed="7",
                                    prelude=prelude)
    wait_until(marker.exists, process, "reaching step 3")
    process.kill_group(signal.SIGINT)
    assert process.wait() == 128 + signal.SIGINT
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and "SIGINT: stopped after step 3, checkpoint " in lines[0] and "--resume" in lines[0]
    assert (run / "checkpoints" / "step-00000003.pt").exists()  # the stop step's own, not the last periodic one
    assert "Traceback" not in process.stderr


# The held harness itself, given the signal at the worst moment: sent by the run to itself the
# instant its marker appears, before any wait has begun (a test on a loaded machine can send it then).
SIGNAL_AS_THE_MARKER_APPEARS = """
import os as _os, signal as _signal
_replace = _os.replace
def _replace_then_signal(source, destination):
    _replace(source, destination)
    if str(destination).endswith(".held"):
        _os.kill(_os.getpid(), _signal.SIGTERM)
_os.replace = _replace_then_signal
"""


def test_a_held_run_signalled_the_moment_its_marker_appears_still_stops_there(tmp_path):
    """Every signal test holds its run with conftest's harness: a signal that arrives between the
    marker and the wait must still end the hold (signal.pause() there waited for ever)."""
    run = tmp_path / "signalled"
    process, marker = start_held_at(3, run, "--out", str(run), *ARGS, hash_seed="7",
                                    prelude=SIGNAL_AS_THE_MARKER_APPEARS)
    try:
        returncode = process.popen.wait(timeout=120)  # a few seconds' run: longer is the hang
    finally:
        process.kill_group(signal.SIGKILL)
    assert returncode == 128 + signal.SIGTERM, process.stderr[-3000:]
    assert marker.exists() and "SIGTERM: stopped after step 3, checkpoint " in process.stderr


def test_sigkill_is_a_real_kill(interrupted):
    stopped, _ = interrupted
    assert stopped["sigkill_workers2"][0] == -signal.SIGKILL


def test_a_truncated_newest_checkpoint_is_named_in_a_warning_and_skipped_and_the_result_is_exact(
        interrupted, runs, tmp_path, capsys):
    run, _ = interrupted[1]["sigterm"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()  # as if it had been killed after its last checkpoint
    newest = sorted((copy / "checkpoints").glob("step-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # as by a full disk
    assert main(["--out", str(copy), "--resume"]) == 0  # in this process: it resumes from the one before
    assert f"skipping damaged checkpoint {newest}" in capsys.readouterr().err
    resumed = read_run(copy)
    assert resumed.metrics == runs["seed7"].metrics and resumed.weights == runs["seed7"].weights


def test_the_epoch_line_of_a_run_resumed_mid_epoch_averages_the_whole_epoch_as_the_run_never_stopped(
        runs, tmp_path, capsys):
    """The console's train_loss of the epoch a run resumed in is the mean over all its steps, those
    before the stop included, as metrics.csv and the run that never stopped have it."""
    stop = steps_per_epoch() // 2
    assert main([*ARGS, "--out", str(tmp_path / "run"), "--stop-after-steps", str(stop)]) == 0
    capsys.readouterr()
    assert main(["--out", str(tmp_path / "run"), "--resume"]) == 0
    first_epoch = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch 1/"))
    losses = [float(row["loss"]) for row in runs["seed7"].metrics if row["split"] == "train" and row["epoch"] == "0"]
    whole, since_resume = sum(losses) / len(losses), sum(losses[stop:]) / len(losses[stop:])
    assert f"train_loss {whole:.4f}" in first_epoch
    assert f"{whole:.4f}" != f"{since_resume:.4f}"  # the mean of the steps after the resume alone is another


def test_every_checkpoint_loads_with_weights_only(interrupted):
    import torch

    stopped_run, _ = interrupted[1]["sigterm"]
    for path in (stopped_run.path / "checkpoints").glob("step-*.pt"):
        state = torch.load(path, weights_only=True)
        assert {"model", "optimizer", "scheduler", "epoch", "epoch_step", "step", "config",
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
    run, _ = interrupted[1]["sigterm"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()  # make it look interrupted again
    err = refused(["--out", str(copy), "--resume", "--seed", "8", "--batch-size", "32"], capsys)
    assert "seed (recorded 7, given 8)" in err and "batch_size (recorded 16, given 32)" in err


def test_resuming_in_another_environment_warns_and_names_what_changed(interrupted, tmp_path, capsys):
    run, _ = interrupted[1]["sigterm"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()
    environment = json.loads((copy / "environment.json").read_text())
    environment["torch"] = "1.0.0"  # as if the run had started on another software stack
    (copy / "environment.json").write_text(json.dumps(environment))
    assert main(["--out", str(copy), "--resume"]) == 0  # in this process: resumes all the same
    err = capsys.readouterr().err
    assert "warning: resuming in another environment (torch: '1.0.0' ->" in err


def test_a_resume_from_the_checkpoint_after_the_last_epoch_says_so_and_writes_the_same_result(
        interrupted, runs, tmp_path, capsys):
    run, _ = interrupted[1]["sigterm"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()  # as if killed between the last checkpoint and the result
    assert main(["--out", str(copy), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "(after the last epoch, step " in out and "train_loss" not in out  # no epoch left to train
    assert read_run(copy).weights == runs["seed7"].weights


def test_resume_where_every_checkpoint_is_damaged_is_refused_saying_so(interrupted, tmp_path, capsys):
    run, _ = interrupted[1]["sigterm"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()
    for path in (copy / "checkpoints").glob("step-*.pt"):
        path.write_bytes(b"not a checkpoint")
    line = refused(["--out", str(copy), "--resume"], capsys)
    assert "all 3 checkpoints" in line and "are damaged" in line and "before its first" not in line


def test_resume_of_a_run_that_wrote_no_checkpoint_yet_says_that_and_not_damaged(interrupted, tmp_path, capsys):
    """The negative control of the test above: told apart, each gets its own sentence."""
    run, _ = interrupted[1]["sigterm"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()
    shutil.rmtree(copy / "checkpoints")
    line = refused(["--out", str(copy), "--resume"], capsys)
    assert "no checkpoint in" in line and "yet" in line and "damaged" not in line


def test_resume_of_a_finished_run_with_other_settings_is_refused_too(runs, capsys):
    err = refused(["--out", str(runs["seed7"].path), "--resume", "--seed", "3", "--epochs", "300"], capsys)
    assert "seed (recorded 7, given 3)" in err and "epochs (recorded 2, given 300)" in err


def test_resume_of_a_finished_run_with_its_own_settings_has_nothing_to_do(runs, capsys):
    assert main(["--out", str(runs["seed7"].path), "--resume", "--num-workers", "2"]) == 0
    assert "nothing to resume" in capsys.readouterr().out


def test_a_resume_cuts_metrics_csv_back_to_the_rows_its_checkpoint_counted(runs, tmp_path, capsys):
    """Rows written after the checkpoint (one of them torn by the kill) are dropped and written
    again, once: as if the run had been killed late in its second epoch."""
    import torch

    copy = shutil.copytree(runs["seed7"].path, tmp_path / "copy")
    (copy / "summary.json").unlink()
    (copy / "model.pt").unlink()
    checkpoints = sorted((copy / "checkpoints").glob("step-*.pt"))
    for newer in checkpoints[1:]:
        newer.unlink()  # resume from the oldest one kept
    counted = torch.load(checkpoints[0], weights_only=True)["metrics_rows"]
    with open(copy / "metrics.csv", "a") as metrics:
        metrics.write("1,99,train,0.5")  # a torn row, after all the rows the checkpoint did not count
    assert len((copy / "metrics.csv").read_text().splitlines()) > 1 + counted + 1
    assert main(["--out", str(copy), "--resume"]) == 0  # in this process
    resumed = read_run(copy)
    assert resumed.metrics == runs["seed7"].metrics and resumed.weights == runs["seed7"].weights


def test_resume_where_there_is_no_run_is_refused(tmp_path, capsys):
    assert "holds no run (config.json is missing)" in refused(["--out", str(tmp_path), "--resume"], capsys)


def test_a_new_run_into_an_interrupted_one_is_refused_and_points_to_resume(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert "--resume" in refused(["--out", str(tmp_path)], capsys)


def finished_copy(interrupted, tmp_path) -> Path:
    """A copy of a finished run, as if killed between its last checkpoint and its result."""
    run, _ = interrupted[1]["sigterm"]
    copy = shutil.copytree(run.path, tmp_path / "copy")
    (copy / "summary.json").unlink()
    return copy


@pytest.mark.parametrize("unfit", ["a tensor of another shape", "no optimizer"])
def test_a_checkpoint_that_loads_but_does_not_fit_is_skipped_saying_why_and_the_result_is_exact(
        unfit, interrupted, runs, tmp_path, capsys):
    """A file that loads is not yet a checkpoint of this run: one that does not fit the model or the
    optimizer counts as damaged, the one before it is used, and the resume is still exact."""
    import torch

    copy = finished_copy(interrupted, tmp_path)
    newest = sorted((copy / "checkpoints").glob("step-*.pt"))[-1]
    state = torch.load(newest, weights_only=True)
    if unfit == "no optimizer":
        del state["optimizer"]
    else:
        name = next(iter(state["model"]))
        state["model"][name] = torch.zeros(3, 1, 1)
    torch.save(state, newest)
    assert main(["--out", str(copy), "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"warning: skipping checkpoint {newest}: it does not fit the model and optimizer" in err
    resumed = read_run(copy)
    assert resumed.metrics == runs["seed7"].metrics and resumed.weights == runs["seed7"].weights


def test_a_metrics_csv_shorter_than_its_checkpoint_counts_is_refused_in_one_line_and_left_as_it_was(
        interrupted, tmp_path, capsys):
    """Rows lost after the checkpoint counted them (a restore from a backup, say): resuming would
    leave a gap in metrics.csv, so it is refused."""
    copy = finished_copy(interrupted, tmp_path)
    lines = (copy / "metrics.csv").read_text().splitlines(keepends=True)
    (copy / "metrics.csv").write_text("".join(lines[: len(lines) // 2]))
    before = {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()}
    line = refused(["--out", str(copy), "--resume"], capsys)
    assert "whole rows, fewer than the" in line and "--overwrite" in line
    assert {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()} == before


def test_a_torn_last_row_is_cut_back_with_a_note_and_the_result_is_exact(interrupted, runs, tmp_path, capsys):
    """A kill while a row was written leaves half a row: cut back, never appended to."""
    copy = finished_copy(interrupted, tmp_path)
    with open(copy / "metrics.csv", "a") as metrics:
        metrics.write("1,99,train,0.12")  # no newline: torn
    assert main(["--out", str(copy), "--resume"]) == 0
    assert "ended in a torn row" in capsys.readouterr().err
    resumed = read_run(copy)
    assert resumed.metrics == runs["seed7"].metrics and resumed.weights == runs["seed7"].weights


def test_what_interrupted_writes_and_an_earlier_failure_left_is_cleared_when_the_run_resumes(interrupted, tmp_path):
    copy = finished_copy(interrupted, tmp_path)
    leftovers = [copy / "checkpoints" / ".step-00000099.pt.1a2b3c4d.tmp", copy / ".metrics.csv.5e6f7a8b.tmp",
                 copy / "error.log"]
    for path in leftovers:
        path.write_text("left by a kill")
    assert main(["--out", str(copy), "--resume"]) == 0
    assert [path for path in leftovers if path.exists()] == []
