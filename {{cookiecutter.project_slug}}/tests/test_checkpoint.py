"""Specifications of atomic writes: a write that fails half-way leaves the old file as it was."""

from __future__ import annotations

import pytest

from {{ cookiecutter.project_slug }}.engine.checkpoint import load_latest_checkpoint
from {{ cookiecutter.project_slug }}.engine.files import atomic_write, atomic_write_text


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
