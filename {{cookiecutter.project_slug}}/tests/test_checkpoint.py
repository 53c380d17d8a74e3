"""Specifications of checkpoint files: a write that fails half-way leaves the old file as it was, and
a checkpoint made to run code when it is loaded is refused without running it."""

from __future__ import annotations

import shutil

import pytest
import torch

from {{ cookiecutter.project_slug }}.engine.checkpoint import load_latest_checkpoint
from {{ cookiecutter.project_slug }}.engine.files import atomic_write, atomic_write_text
from {{ cookiecutter.project_slug }}.train import main

from conftest import FAST, read_run, steps_per_epoch


class DiskFull(OSError):
    pass


def write_half_then_fail(file) -> None:
    file.write(b"the first half of a new checkpoint")
    raise DiskFull("no space left on device")


def test_a_write_that_fails_half_way_leaves_the_old_file_intact_and_no_temporary_file(tmp_path):
    path = tmp_path / "step-00000008.pt"
    atomic_write_text(path, "the old, complete checkpoint")
    with pytest.raises(DiskFull):
        atomic_write(path, write_half_then_fail)
    assert path.read_text() == "the old, complete checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no .tmp left behind


def test_a_new_file_that_fails_half_way_is_never_seen_at_all(tmp_path):
    path = tmp_path / "metrics.csv"
    with pytest.raises(DiskFull):
        atomic_write(path, write_half_then_fail)
    assert list(tmp_path.iterdir()) == []


def test_without_any_intact_checkpoint_there_is_nothing_to_resume_from(tmp_path, capsys):
    (tmp_path / "step-00000004.pt").write_bytes(b"torn")
    assert load_latest_checkpoint(tmp_path) is None
    assert "skipping damaged checkpoint" in capsys.readouterr().err


def test_checkpoints_are_ordered_by_step_past_9_99_and_999_and_only_the_newest_three_are_kept(tmp_path):
    """File names sort as the steps do (zero-padded), so the newest is the highest step."""
    from {{ cookiecutter.project_slug }}.engine.checkpoint import (
        FORMAT_VERSION,
        KEEP_LAST,
        load_latest_checkpoint,
        save_checkpoint,
    )

    for step in (8, 9, 10, 99, 100, 999, 1000):
        save_checkpoint(tmp_path, {"step": step})
    assert sorted(p.name for p in tmp_path.glob("step-*.pt")) == [
        "step-00000100.pt", "step-00000999.pt", "step-00001000.pt"][-KEEP_LAST:]
    state, path = load_latest_checkpoint(tmp_path)
    assert state == {"format_version": FORMAT_VERSION, "step": 1000} and path.name == "step-00001000.pt"


def test_checkpoint_every_counts_the_runs_steps_across_epochs_and_each_epoch_ends_with_one(tmp_path, monkeypatch):
    """--checkpoint-every N: a checkpoint at every N-th step of the run, counted from its first step
    (not from each epoch's), and one at the end of each epoch. N is one more than an epoch's steps,
    so that the run's multiples of N fall inside epochs, where a count restarted at each epoch never
    reaches N; the steps are computed here, from the flags alone."""
    from {{ cookiecutter.project_slug }} import train

    per, epochs = steps_per_epoch(), 3
    every, saved = per + 1, []
    save_state = train.save_state
    monkeypatch.setattr(train, "save_state", lambda plan, state, *rest: saved.append(state.step) or save_state(
        plan, state, *rest))
    flags = [*FAST, "--epochs", str(epochs), "--checkpoint-every", str(every)]
    assert main(["--out", str(tmp_path / "run"), *flags]) == 0
    assert saved == [step for step in range(1, per * epochs + 1) if step % every == 0 or step % per == 0]
    assert per < 2 or any(step % per for step in saved)  # the control: some fall inside an epoch


class RunsCodeWhenUnpickled:
    """What a crafted checkpoint hides among its tensors: unpickling it calls exec() on this code,
    which writes a file, so that whether it ran can be seen."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('the payload ran')",)


def test_a_checkpoint_crafted_to_run_code_is_refused_unrun_and_the_run_resumes_from_the_one_before(
        runs, tmp_path, capsys):
    run = shutil.copytree(runs["seed7"].path, tmp_path / "run")
    for name in ("summary.json", "model.pt"):  # as if it had been killed after its last checkpoint
        (run / name).unlink()
    before, newest = sorted((run / "checkpoints").glob("step-*.pt"))[-2:]
    marker = tmp_path / "the-payload-ran"
    checkpoint = torch.load(newest, weights_only=True)
    torch.save({**checkpoint, "payload": RunsCodeWhenUnpickled(marker)}, newest)  # a real checkpoint, plus code
    # The payload is live: an unsafe load runs it (on a copy, to leave the run's file as it was).
    torch.load(shutil.copy(newest, tmp_path / "copy.pt"), weights_only=False)
    assert marker.read_text() == "the payload ran"
    marker.unlink()

    assert main(["--out", str(run), "--resume"]) == 0  # in this process: whatever runs, runs here
    assert not marker.exists()
    captured = capsys.readouterr()
    warning = [line for line in captured.err.splitlines() if str(newest) in line]
    assert warning == [f"warning: skipping damaged checkpoint {newest} (it holds objects other than tensors and "
                       "plain values, which could run code when loaded; it was not loaded)"]
    step = torch.load(before, weights_only=True)["step"]
    assert f"resuming from {before} (epoch " in captured.out and f"step {step})" in captured.out
    resumed = read_run(run)
    assert resumed.metrics == runs["seed7"].metrics and resumed.weights == runs["seed7"].weights


def test_a_checkpoint_of_another_format_is_skipped_and_the_run_resumes_from_the_one_before(runs, tmp_path, capsys):
    """A checkpoint written by another version of this code (its format_version differs) is not
    read as if it were of this one: a warning, and the resume takes the one before."""
    run = shutil.copytree(runs["seed7"].path, tmp_path / "run")
    for name in ("summary.json", "model.pt"):
        (run / name).unlink()
    before, newest = sorted((run / "checkpoints").glob("step-*.pt"))[-2:]
    checkpoint = torch.load(newest, weights_only=True)
    renamed = {"format_version": checkpoint["format_version"] - 1, "global_step": checkpoint["step"],
               **{key: value for key, value in checkpoint.items() if key not in ("format_version", "step")}}
    torch.save(renamed, newest)  # as an older version laid it out
    assert main(["--out", str(run), "--resume"]) == 0
    captured = capsys.readouterr()
    assert any(str(newest) in line and "format version" in line for line in captured.err.splitlines())
    assert f"resuming from {before} (epoch " in captured.out
    assert read_run(run).weights == runs["seed7"].weights


def test_train_seconds_after_a_resume_adds_the_time_counted_before_it(runs, tmp_path):
    """summary.json's train_seconds is the run's whole training time, across every resume: what the
    checkpoint counted, plus what this process trained."""
    run = shutil.copytree(runs["seed7"].path, tmp_path / "run")
    for name in ("summary.json", "model.pt"):
        (run / name).unlink()
    newest = sorted((run / "checkpoints").glob("step-*.pt"))[-1]
    checkpoint = torch.load(newest, weights_only=True)
    torch.save({**checkpoint, "train_seconds": 1000.0}, newest)  # as if the steps before took that long
    assert main(["--out", str(run), "--resume"]) == 0
    assert 1000.0 <= read_run(run).summary["train_seconds"] < 1000.0 + runs["seed7"].summary["train_seconds"] + 60


@pytest.mark.parametrize("resumes", [1, 2, 3])
def test_train_seconds_add_up_across_any_number_of_resumes(resumes, tmp_path):
    """A run stopped and resumed again and again: each checkpoint counts what the one it resumed
    from counted plus what this process trained, so no resume loses the time before it. Before
    each resume its checkpoint is made to count 1000 s more, as if those steps had been slow."""
    out = tmp_path / "run"
    assert main([*FAST, "--seed", "7", "--out", str(out), "--stop-after-steps", "3"]) == 0
    for resume in range(1, resumes + 1):
        newest = sorted((out / "checkpoints").glob("step-*.pt"))[-1]
        checkpoint = torch.load(newest, weights_only=True)
        torch.save({**checkpoint, "train_seconds": checkpoint["train_seconds"] + 1000.0}, newest)
        stop = [] if resume == resumes else ["--stop-after-steps", str(3 * (resume + 1))]
        assert main(["--out", str(out), "--resume", *stop]) == 0
    assert read_run(out).summary["train_seconds"] >= 1000.0 * resumes
