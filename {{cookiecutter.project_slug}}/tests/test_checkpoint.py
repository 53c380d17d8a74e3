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
