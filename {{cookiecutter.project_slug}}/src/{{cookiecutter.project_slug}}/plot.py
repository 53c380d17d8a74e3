"""Pictures of runs and studies: training loss per step, and every validation figure the task has.

    python -m {{ cookiecutter.project_slug }}.plot runs/a runs/b --out curves.png
    python -m {{ cookiecutter.project_slug }}.plot studies/lr05 studies/lr01 --label "lr 0.05" --label "lr 0.01" \\
        --title "Learning rate" --smooth 5 --x epochs --out lr.pdf

A run is drawn as its curves; a study as the mean over its seeds, with a band for the 95 %
confidence interval of that mean (Student's t, the numbers study.json records), the seed count in
the legend. --smooth N draws the training loss as a trailing mean of N steps (the axis says so).
The file's suffix picks the format: .png, .pdf or .svg (vector, for papers and slides). The
numbers drawn are the ones in each metrics.csv, unrounded. A bad path: one line, exit 2.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from .engine.cli import make_parser
from .engine.files import file_in_the_way, write_problem
from .engine.runs import Run, RunError, read_json, read_run
from .engine.statistics import statistics_of

FORMATS = (".png", ".pdf", ".svg")


def run_series(run: Run) -> dict:
    """What a run's picture shows, exactly as metrics.csv has it."""
    train = [row for row in run.metrics if row["split"] == "train"]
    val = [row for row in run.metrics if row["split"] == "val"]
    first_epoch = sum(row["epoch"] == train[0]["epoch"] for row in train) if train else 1
    return {"steps": [int(row["step"]) for row in train], "loss": [float(row["loss"]) for row in train],
            "val_steps": [int(row["step"]) for row in val],
            "val": {name: [float(row[name]) for row in val] for name in run.metric_names},
            "steps_per_epoch": first_epoch, "seeds": None}


def study_runs(folder: Path) -> list[Run]:
    """The finished runs of a study folder (study.py writes one per seed, seed-<N>/)."""
    seeds = read_json(folder / "study.json", required=True).get("seeds") or []
    if not seeds:
        raise RunError(f"{folder / 'study.json'} names no seeds")
    return [read_run(folder / f"seed-{seed}") for seed in seeds]


def study_series(folder: Path) -> dict:
    """A study: at each step, the mean over its seeds, and the 95 % confidence interval of that mean."""
    runs = [run_series(run) for run in study_runs(folder)]
    if any(run["steps"] != runs[0]["steps"] or run["val_steps"] != runs[0]["val_steps"] for run in runs):
        raise RunError(f"the runs of {folder} have different steps; plot them one by one instead")
    mean = {**runs[0], "seeds": len(runs), "val": {}, "bands": {}}
    columns = {"loss": [run["loss"] for run in runs], **{f"val_{name}": [run["val"][name] for run in runs]
                                                        for name in runs[0]["val"]}}
    for key, values in columns.items():
        stats = [statistics_of(list(at_step)) for at_step in zip(*values, strict=True)]
        if key == "loss":
            mean["loss"] = [s["mean"] for s in stats]
        else:
            mean["val"][key.removeprefix("val_")] = [s["mean"] for s in stats]
        if len(runs) > 1:
            mean["bands"][key] = ([s["ci95"][0] for s in stats], [s["ci95"][1] for s in stats])
    return mean


def trailing_mean(values: list[float], window: int) -> list[float]:
    """The mean of each value and the window-1 before it (fewer at the start)."""
    sums, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        sums.append(total / min(i + 1, window))
    return sums


def draw(series: dict[str, dict], out: Path, title: str | None = None, smooth: int = 1, x: str = "steps") -> None:
    """The picture of figure_of() into `out`; the suffix says the format."""
    import matplotlib.pyplot as plt

    figure = figure_of(series, title, smooth, x)
    try:
        figure.savefig(out, dpi=150)
    finally:
        plt.close(figure)


def figure_of(series: dict[str, dict], title: str | None = None, smooth: int = 1, x: str = "steps"):
    """One panel for the training loss, one per validation figure; a study's band is its 95 % interval."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no window, no display needed
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(name for s in series.values() for name in s["val"]))
    columns = min(3, 1 + len(names))
    rows = math.ceil((1 + len(names)) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    panels = list(axes.flat)
    for label, s in series.items():
        scale = s["steps_per_epoch"] if x == "epochs" else 1
        legend = f"{label} (mean of {s['seeds']} seeds, 95% CI)" if s["seeds"] else label
        steps = [step / scale for step in s["steps"]]
        line = panels[0].plot(steps, trailing_mean(s["loss"], smooth), label=legend, linewidth=1)[0]
        band(panels[0], steps, s, "loss", line.get_color(), smooth)
        for panel, name in zip(panels[1:], names, strict=False):
            if name in s["val"]:
                val_steps = [step / scale for step in s["val_steps"]]
                panel.plot(val_steps, s["val"][name], marker="o", markersize=3, color=line.get_color(), label=legend)
                band(panel, val_steps, s, f"val_{name}", line.get_color())
    axis = "epoch" if x == "epochs" else "step"
    panels[0].set(xlabel=axis, ylabel="training loss" + (f" (mean of {smooth} steps)" if smooth > 1 else ""))
    for panel, name in zip(panels[1:], names, strict=False):
        panel.set(xlabel=axis, ylabel=f"validation {name}")
    for panel in panels[1 + len(names):]:
        panel.set_visible(False)
    panels[0].legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def band(panel, steps: list[float], series: dict, key: str, color: str, smooth: int = 1) -> None:
    if key in series.get("bands", {}):
        low, high = series["bands"][key]
        panel.fill_between(steps, trailing_mean(low, smooth), trailing_mean(high, smooth), alpha=0.25,
                           color=color, linewidth=0)


def out_problem(out: Path, flag: str = "--out") -> str | None:
    """Why a picture cannot be written to `out` (given as `flag`), as one line; None if it can be tried."""
    if out.is_dir():
        return f"{flag} {out} is a folder; give a file name such as {out / 'curves.png'}"
    if out.suffix.lower() not in FORMATS:
        return f"{flag} {out}: the suffix says the format; choose one of {', '.join(FORMATS)}"
    blocking = file_in_the_way(out)
    if blocking is not None:
        return f"{flag} {out}: {blocking} is a file, not a folder"
    if not out.parent.is_dir():
        return f"{flag} {out}: the folder {out.parent} does not exist"
    problem = write_problem(out.parent)
    return f"{flag} {out}: cannot write there ({problem})" if problem else None


def save_picture(series: dict[str, dict], out: Path, **options) -> str | None:
    """draw() into `out`; the reason as one line if it cannot be written."""
    problem = out_problem(out)
    if problem is None:
        try:
            draw(series, out, **options)
        except OSError as error:
            problem = f"--out {out}: cannot write there ({error.strerror or error})"
    return problem


def main(argv: list[str] | None = None) -> int:
    parser = make_parser("plot", "Draw runs and studies.")
    parser.add_argument("paths", type=Path, nargs="+", metavar="PATH", help="run folders or study folders")
    parser.add_argument("--out", type=Path, required=True, help="the picture to write: .png, .pdf or .svg")
    parser.add_argument("--label", action="append", default=[], help="a series' name in the legend, once per PATH "
                        "in order (default: the folder)")
    parser.add_argument("--title", default=None, help="a title above the panels")
    parser.add_argument("--smooth", type=int, default=1, metavar="N", help="draw the training loss as a trailing "
                        "mean of N steps (default: 1, as recorded)")
    parser.add_argument("--x", choices=("steps", "epochs"), default="steps",
                        help="the horizontal axis (default: steps)")
    args = parser.parse_args(argv)
    if args.label and len(args.label) != len(args.paths):
        parser.error(f"--label given {len(args.label)} times for {len(args.paths)} paths; give one per path")
    if args.smooth < 1:
        parser.error(f"--smooth must be at least 1, not {args.smooth}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        parser.error("matplotlib is not installed: python -m pip install matplotlib")
    series = {}
    try:
        for path, label in zip(args.paths, args.label or [str(p) for p in args.paths], strict=True):
            series[label] = study_series(path) if (path / "study.json").exists() else run_series(read_run(path))
    except RunError as error:
        parser.error(str(error))
    problem = save_picture(series, args.out, title=args.title, smooth=args.smooth, x=args.x)
    if problem:
        parser.error(problem)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
