"""Pictures of runs and studies: training loss per step, validation accuracy per evaluation.

    python -m {{ cookiecutter.project_slug }}.plot runs/a runs/b --out curves.png
    python -m {{ cookiecutter.project_slug }}.plot studies/lr05 --out study.png   # mean over seeds, min-max band

The numbers drawn are the ones in each metrics.csv, unrounded. A bad path: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .runs import Run, RunError, read_run

PROG = "python -m {{ cookiecutter.project_slug }}.plot"


def run_series(run: Run) -> dict[str, list]:
    """What a run's picture shows, exactly as metrics.csv has it."""
    train = [row for row in run.metrics if row["split"] == "train"]
    val = [row for row in run.metrics if row["split"] == "val"]
    return {"steps": [int(row["step"]) for row in train], "loss": [float(row["loss"]) for row in train],
            "val_steps": [int(row["step"]) for row in val], "val_accuracy": [float(row["accuracy"]) for row in val]}


def study_runs(folder: Path) -> list[Run]:
    """The finished runs of a study folder (study.py writes one per seed, seed-<N>/)."""
    seeds = json.loads((folder / "study.json").read_text(encoding="utf-8"))["seeds"]
    return [read_run(folder / f"seed-{seed}") for seed in seeds]


def band(series: list[dict], key: str, steps_key: str) -> dict[str, list]:
    """Mean, min and max of `key` across runs, step by step (every run of a study has the same steps)."""
    steps = series[0][steps_key]
    if any(s[steps_key] != steps for s in series):
        raise RunError("the study's runs have different steps; plot them one by one instead")
    columns = list(zip(*(s[key] for s in series), strict=True))
    return {"steps": steps, "mean": [sum(c) / len(c) for c in columns], "min": [min(c) for c in columns],
            "max": [max(c) for c in columns]}


def study_series(folder: Path) -> dict[str, dict]:
    series = [run_series(run) for run in study_runs(folder)]
    return {"loss": band(series, "loss", "steps"), "val_accuracy": band(series, "val_accuracy", "val_steps")}


def draw(runs: dict[str, dict], studies: dict[str, dict], out: Path) -> None:
    """Two panels: training loss and validation accuracy; a study is its mean with a min-max band."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no window, no display needed
    import matplotlib.pyplot as plt

    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(11, 4))
    for label, series in runs.items():
        loss_axes.plot(series["steps"], series["loss"], label=label, linewidth=1)
        accuracy_axes.plot(series["val_steps"], series["val_accuracy"], marker="o", label=label)
    for label, series in studies.items():
        for axes, key, style in ((loss_axes, "loss", {}), (accuracy_axes, "val_accuracy", {"marker": "o"})):
            lines = axes.plot(series[key]["steps"], series[key]["mean"], label=f"{label} (mean; band: min-max)",
                              **style)
            axes.fill_between(series[key]["steps"], series[key]["min"], series[key]["max"], alpha=0.25,
                              color=lines[0].get_color())
    loss_axes.set(xlabel="step", ylabel="training loss")
    accuracy_axes.set(xlabel="step", ylabel="validation accuracy")
    for axes in (loss_axes, accuracy_axes):
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Draw runs and studies.", allow_abbrev=False)
    parser.add_argument("paths", type=Path, nargs="+", metavar="PATH", help="run folders or study folders")
    parser.add_argument("--out", type=Path, required=True, help="the PNG file to write")
    parser.error = lambda message: parser.exit(2, f"{PROG}: error: {message}\n")
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        parser.error("matplotlib is not installed: python -m pip install matplotlib")
    runs, studies = {}, {}
    try:
        for path in args.paths:
            if (path / "study.json").exists():
                studies[str(path)] = study_series(path)
            else:
                runs[str(path)] = run_series(read_run(path))
    except (RunError, OSError, ValueError, KeyError) as error:
        parser.error(str(error))
    draw(runs, studies, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
