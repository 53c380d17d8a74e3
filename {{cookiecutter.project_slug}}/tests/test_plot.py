"""Specifications of the pictures: the numbers drawn are the ones in metrics.csv."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from {{ cookiecutter.project_slug }} import plot


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_a_picture_of_two_runs_is_a_png_of_plausible_size(runs, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert plot.main([str(runs["seed7"].path), str(runs["seed8"].path), "--out", str(out)]) == 0
    width, height = png_size(out)
    assert 600 <= width <= 3000 and 200 <= height <= 2000
    assert f"wrote {out}" in capsys.readouterr().out


def test_the_data_handed_to_the_drawing_is_exactly_metrics_csv(runs, tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(plot, "draw", lambda runs_, studies, out: drawn.update(runs_))
    run = runs["seed7"]
    plot.main([str(run.path), "--out", str(tmp_path / "x.png")])
    series = drawn[str(run.path)]
    train = [row for row in run.metrics if row["split"] == "train"]
    assert series["steps"] == [int(row["step"]) for row in train]
    assert series["loss"] == [float(row["loss"]) for row in train]  # unrounded
    assert series["val_accuracy"] == [float(row["accuracy"]) for row in run.metrics if row["split"] == "val"]


def fake_study(runs, folder):
    """A study folder made of two finished runs (what study.py writes, without training)."""
    folder.mkdir()
    for seed in (7, 8):
        shutil.copytree(runs[f"seed{seed}"].path, folder / f"seed-{seed}")
    (folder / "study.json").write_text(json.dumps({"seeds": [7, 8]}))
    return folder


def test_a_study_is_drawn_as_its_mean_with_a_min_max_band(runs, tmp_path, monkeypatch):
    folder = fake_study(runs, tmp_path / "study")
    drawn = {}
    monkeypatch.setattr(plot, "draw", lambda runs_, studies, out: drawn.update(studies))
    plot.main([str(folder), "--out", str(tmp_path / "x.png")])
    loss = drawn[str(folder)]["loss"]
    first = [float(r["loss"]) for r in runs["seed7"].metrics if r["split"] == "train"]
    second = [float(r["loss"]) for r in runs["seed8"].metrics if r["split"] == "train"]
    assert loss["mean"] == [(a + b) / 2 for a, b in zip(first, second, strict=True)]
    assert loss["min"] == [min(a, b) for a, b in zip(first, second, strict=True)]
    assert loss["max"] == [max(a, b) for a, b in zip(first, second, strict=True)]


def test_a_study_picture_is_a_png(runs, tmp_path):
    folder = fake_study(runs, tmp_path / "study")
    assert plot.main([str(folder), "--out", str(tmp_path / "study.png")]) == 0
    assert png_size(tmp_path / "study.png")[0] >= 600


def test_a_path_that_holds_no_run_gets_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        plot.main([str(tmp_path / "missing"), "--out", str(tmp_path / "x.png")])
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
