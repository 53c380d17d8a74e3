"""Specifications of the pictures: the numbers drawn are the ones in metrics.csv, and a study's
band is the 95 % confidence interval that study.json records."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from {{ cookiecutter.project_slug }} import plot
from {{ cookiecutter.project_slug }}.engine.statistics import statistics_of

pytest.importorskip("matplotlib", reason="the pictures need matplotlib (a dependency of the project)")


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_a_picture_of_two_runs_is_a_png_of_plausible_size(runs, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert plot.main([str(runs["seed7"].path), str(runs["seed8"].path), "--out", str(out)]) == 0
    width, height = png_size(out)
    assert 600 <= width <= 4000 and 200 <= height <= 3000
    assert f"wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize("suffix, magic", [(".pdf", b"%PDF"), (".svg", b"<?xml"), (".PNG", b"\x89PNG"),
                                           (".Pdf", b"%PDF")])
def test_pdf_and_svg_are_written_as_the_suffix_says(runs, tmp_path, suffix, magic):
    """In either case: a camera's or Windows' CURVES.PNG is the PNG it says."""
    out = tmp_path / f"curves{suffix}"
    assert plot.main([str(runs["seed7"].path), "--out", str(out)]) == 0
    assert out.read_bytes().startswith(magic)


def test_the_data_handed_to_the_drawing_is_exactly_metrics_csv(runs, tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(plot, "draw", lambda series, out, **options: drawn.update(series))
    run = runs["seed7"]
    plot.main([str(run.path), "--out", str(tmp_path / "x.png")])
    series = drawn[str(run.path)]
    train = [row for row in run.metrics if row["split"] == "train"]
    assert series["steps"] == [int(row["step"]) for row in train]
    assert series["loss"] == [float(row["loss"]) for row in train]  # unrounded
    for name in run.metric_names:  # every figure the task has
        assert series["val"][name] == [float(row[name]) for row in run.metrics if row["split"] == "val"]
    # --x epochs divides each step by this: the run's steps over its whole epochs, not a count of rows.
    assert series["steps_per_epoch"] == run.summary["steps"] // run.config["epochs"]


def fake_study(runs, folder, seeds=(7, 8)):
    """A study folder made of finished runs (what study.py writes, without training)."""
    folder.mkdir()
    for seed in seeds:
        shutil.copytree(runs[f"seed{seed}"].path, folder / f"seed-{seed}")
    (folder / "study.json").write_text(json.dumps({"seeds": list(seeds)}))
    return folder


def test_a_study_is_drawn_as_its_mean_with_the_95_percent_interval_of_the_mean(runs, tmp_path):
    series = plot.study_series(fake_study(runs, tmp_path / "study"))
    first = [float(r["loss"]) for r in runs["seed7"].metrics if r["split"] == "train"]
    second = [float(r["loss"]) for r in runs["seed8"].metrics if r["split"] == "train"]
    stats = [statistics_of([a, b]) for a, b in zip(first, second, strict=True)]
    assert series["seeds"] == 2
    assert series["loss"] == [s["mean"] for s in stats]
    assert series["bands"]["loss"] == ([s["ci95"][0] for s in stats], [s["ci95"][1] for s in stats])


def texts(figure) -> dict:
    panels = [axes for axes in figure.axes if axes.get_visible()]
    legend = figure.legends[0] if figure.legends else None
    return {"ylabels": [axes.get_ylabel() for axes in panels], "xlabels": {axes.get_xlabel() for axes in panels},
            "legend": [text.get_text() for text in legend.get_texts()] if legend else [],
            "title": figure._suptitle.get_text() if figure._suptitle else None,
            "bands": sum(len(axes.collections) for axes in panels)}


def test_a_study_picture_has_labels_a_title_the_seed_count_a_band_per_panel_and_every_figure(runs, tmp_path):
    series = {"lr 0.05": plot.study_series(fake_study(runs, tmp_path / "study")),
              "one run": plot.run_series(runs["seed7"])}
    shown = texts(plot.figure_of(series, title="Learning rate", smooth=3, x="epochs"))
    assert shown["title"] == "Learning rate"
    assert shown["legend"] == ["lr 0.05 (mean of 2 seeds, 95% CI)", "one run"]
    assert shown["ylabels"] == ["training loss (mean of 3 steps)",
                                *(f"validation {name}" for name in runs["seed7"].metric_names)]
    assert shown["xlabels"] == {"epoch"}
    assert shown["bands"] == 1 + len(runs["seed7"].metric_names)  # the study's, in every panel


def test_label_and_title_flags_reach_the_picture(runs, tmp_path, monkeypatch):
    options = {}
    monkeypatch.setattr(plot, "draw", lambda series, out, **kwargs: options.update(kwargs, labels=list(series)))
    plot.main([str(runs["seed7"].path), str(runs["seed8"].path), "--label", "A", "--label", "B", "--title", "T",
               "--smooth", "4", "--x", "epochs", "--out", str(tmp_path / "x.png")])
    assert options == {"labels": ["A", "B"], "title": "T", "smooth": 4, "x": "epochs", "size": None, "dpi": 300}


def test_smoothing_is_a_trailing_mean():
    assert plot.trailing_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert plot.trailing_mean([1.0, 3.0], 1) == [1.0, 3.0]


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        plot.main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0]
    return lines[0]


def test_bad_paths_and_places_get_one_line_and_exit_2(runs, tmp_path, capsys):
    run = str(runs["seed7"].path)
    assert "does not exist" in refused([str(tmp_path / "missing"), "--out", str(tmp_path / "x.png")], capsys)
    assert "does not exist" in refused([run, "--out", str(tmp_path / "no" / "x.png")], capsys)
    assert "choose one of .png, .pdf, .svg" in refused([run, "--out", str(tmp_path / "x.jpg")], capsys)
    assert "is a folder" in refused([run, "--out", str(tmp_path)], capsys)
    assert "--label given 1 times for 2 paths" in refused([run, run, "--label", "A", "--out", "x.png"], capsys)
    for window in ("0", "-3"):  # a trailing mean of no step divides by zero
        assert f"--smooth must be at least 1, not {window}" in refused([run, "--smooth", window, "--out", "x.png"],
                                                                       capsys)
    assert "cannot write" in refused([run, "--out", "/proc/curves.png"], capsys)  # a place that holds no files
    if os.geteuid() != 0:  # root writes anywhere else
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert "cannot write there (Permission denied)" in refused([run, "--out", str(locked / "x.png")], capsys)


def test_a_pdf_embeds_truetype_fonts_never_type_3_which_journals_refuse(runs, tmp_path):
    out = tmp_path / "curves.pdf"
    assert plot.main([str(runs["seed7"].path), "--out", str(out), "--column", "one"]) == 0
    pdf = out.read_bytes()
    assert b"/Type3" not in pdf
    assert b"/TrueType" in pdf or b"/CIDFontType2" in pdf  # Type 42: the font itself, embedded


def test_negative_control_matplotlibs_default_pdf_fonts_are_type_3(runs, tmp_path):
    """What the rule above guards against: without it the same figure embeds Type 3 fonts."""
    import matplotlib.pyplot as plt

    with plt.rc_context({"pdf.fonttype": 3}):
        figure = plot.figure_of({"run": plot.run_series(runs["seed7"])})
        figure.savefig(tmp_path / "type3.pdf")
        plt.close(figure)
    assert b"/Type3" in (tmp_path / "type3.pdf").read_bytes()


@pytest.mark.parametrize("flags, inches", [(("--column", "one"), 3.3), (("--column", "two"), 7.0),
                                           (("--width", "5", "--height", "2"), 5.0),
                                           (("--column", "one", "--width", "5"), 5.0),
                                           (("--column", "two", "--width", "4"), 4.0)])
def test_the_printed_size_and_dpi_are_the_ones_asked_for(flags, inches, runs, tmp_path):
    """--column gives a journal's column width; a --width typed beside it wins (--width: "the printed
    width in inches (default: --column's)")."""
    out = tmp_path / "curves.png"
    assert plot.main([str(runs["seed7"].path), "--out", str(out), *flags, "--dpi", "200"]) == 0
    width, height = png_size(out)
    assert width == round(inches * 200)
    if "--height" in flags:
        assert height == 2 * 200


def test_a_png_is_300_dpi_by_default(runs, tmp_path):
    out = tmp_path / "curves.png"
    assert plot.main([str(runs["seed7"].path), "--out", str(out), "--column", "one"]) == 0
    assert png_size(out)[0] == round(3.3 * 300)


def test_a_narrow_figure_stacks_its_panels_and_keeps_the_legend_below_them(runs):
    series = {"run": plot.run_series(runs["seed7"])}
    figure = plot.figure_of(series, size=(3.3, 5.0))
    figure.canvas.draw()
    panels = [axes for axes in figure.axes if axes.get_visible()]
    assert len({round(axes.get_position().x0, 3) for axes in panels}) == 1  # one column
    legend = figure.legends[0].get_window_extent()
    assert all(legend.y1 <= axes.get_window_extent().y0 + 1 for axes in panels)  # below every panel, over no data


def test_identical_runs_are_one_curve_labelled_as_identical_and_different_ones_two(runs):
    same = plot.run_series(runs["seed7"])
    shown = texts(plot.figure_of({"a": same, "b": dict(same), "c": plot.run_series(runs["seed8"])}))
    assert shown["legend"] == ["a, b: 2 runs, identical", "c"]


def test_runs_that_differ_in_one_validation_figure_alone_are_two_curves(runs):
    same = plot.run_series(runs["seed7"])
    for name, values in same["val"].items():  # the loss and each of the task's figures, in turn
        other = {**same, "val": {**same["val"], name: [*values[:-1], values[-1] + 1.0]}}
        assert texts(plot.figure_of({"a": same, "b": other}))["legend"] == ["a", "b"], name


def test_a_run_that_stopped_on_a_non_finite_step_says_so_in_its_label(runs):
    series = {**plot.run_series(runs["seed7"]), "non_finite_step": 5}
    assert texts(plot.figure_of({"run": series}))["legend"] == ["run (not finite from step 5)"]
