"""Pictures of runs and studies: training loss per step, and every validation figure the task has.

    python -m {{ cookiecutter.project_slug }}.plot runs/a runs/b --out curves.png
    python -m {{ cookiecutter.project_slug }}.plot studies/lr05 studies/lr01 --label "lr 0.05" --label "lr 0.01" \\
        --title "Learning rate" --smooth 5 --x epochs --out lr.pdf

A run is drawn as its curves; a study as the mean over its seeds, with a band for the 95 %
confidence interval of that mean (Student's t, the numbers study.json records), the seed count in
the legend. --smooth N draws the training loss as a trailing mean of N steps (the axis says so).
The file's suffix picks the format: .png, .pdf or .svg (vector, for papers and slides). The
numbers drawn are the ones in each metrics.csv, unrounded. A bad path: one line, exit 2.

For a journal: the figure's size is its printed size (--width and --height in inches, or
--column one / two: 3.3 or 7 inches wide, the usual column widths), so a label set in 8 points
prints in 8 points; PNGs are 300 dpi unless --dpi says otherwise; PDF and PostScript embed
TrueType fonts (Type 42), never the Type 3 fonts that IEEE's PDF eXpress and the ACM refuse; the
legend sits below the panels, over no data; series that are identical in every number are drawn
once and labelled so ("a, b: 2 runs, identical"), since one curve would otherwise hide the other;
and a run that stopped on a non-finite step says so in its label.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from .engine.cli import make_parser, run_command
from .engine.files import file_place_problem
from .engine.runs import Run, RunError, read_json, read_run
from .engine.statistics import statistics_of

FORMATS = (".png", ".pdf", ".svg")
COLUMNS = {"one": 3.3, "two": 7.0}  # inches: the usual widths of a journal's column and page
# Fonts embedded whole as TrueType (PDF, PostScript) and text kept as text (SVG), not glyphs drawn
# as Type 3 procedures, which publishers' PDF checks reject.
EMBEDDED_FONTS = {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}


def run_series(run: Run) -> dict:
    """What a run's picture shows, exactly as metrics.csv has it."""
    train = [row for row in run.metrics if row["split"] == "train"]
    val = [row for row in run.metrics if row["split"] == "val"]
    first_epoch = sum(row["epoch"] == train[0]["epoch"] for row in train) if train else 1
    return {"steps": [int(row["step"]) for row in train], "loss": [float(row["loss"]) for row in train],
            "val_steps": [int(row["step"]) for row in val],
            "val": {name: [float(row[name]) for row in val] for name in run.metric_names},
            "steps_per_epoch": first_epoch, "seeds": None, "non_finite_step": run.non_finite_step}


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


def draw(series: dict[str, dict], out: Path, title: str | None = None, smooth: int = 1, x: str = "steps",
         size: tuple[float, float] | None = None, dpi: int = 300) -> None:
    """The picture of figure_of() into `out`; the suffix says the format, `size` (inches) the
    printed size, `dpi` a PNG's resolution."""
    import matplotlib.pyplot as plt

    with plt.rc_context(EMBEDDED_FONTS):
        figure = figure_of(series, title, smooth, x, size)
        try:
            figure.savefig(out, dpi=dpi)
        finally:
            plt.close(figure)


def identical_merged(series: dict[str, dict]) -> dict[str, dict]:
    """The series, those equal in every number drawn merged into one, labelled by all their names."""
    merged: dict[str, dict] = {}
    for label, s in series.items():
        twin = next((name for name, other in merged.items() if drawn_the_same(other, s)), None)
        if twin is None:
            merged[label] = {**s, "twins": [label]}
        else:
            merged[twin]["twins"].append(label)
    return {(f"{', '.join(s['twins'])}: {len(s['twins'])} runs, identical" if len(s["twins"]) > 1 else label): s
            for label, s in merged.items()}


def drawn_the_same(a: dict, b: dict) -> bool:
    keys = ("steps", "loss", "val_steps", "val", "seeds", "bands")
    return all(a.get(key) == b.get(key) for key in keys)


def figure_of(series: dict[str, dict], title: str | None = None, smooth: int = 1, x: str = "steps",
              size: tuple[float, float] | None = None):
    """One panel for the training loss, one per validation figure; a study's band is its 95 %
    interval. `size` (inches) is the printed size: a narrow figure stacks its panels in one column."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no window, no display needed
    import matplotlib.pyplot as plt

    series = identical_merged(series)
    names = list(dict.fromkeys(name for s in series.values() for name in s["val"]))
    narrow = size is not None and size[0] < 5
    columns = 1 if narrow else min(3, 1 + len(names))
    rows = math.ceil((1 + len(names)) / columns)
    size = size or (4.2 * columns, 3.4 * rows + 0.6)
    with plt.rc_context({"font.size": 8 if narrow else 10}):
        figure, axes = plt.subplots(rows, columns, figsize=size, squeeze=False, layout="constrained")
        panels = list(axes.flat)
        for label, s in series.items():
            draw_series(panels, names, label, s, smooth, x)
        axis = "epoch" if x == "epochs" else "step"
        panels[0].set(xlabel=axis, ylabel="training loss" + (f" (mean of {smooth} steps)" if smooth > 1 else ""))
        for panel, name in zip(panels[1:], names, strict=False):
            panel.set(xlabel=axis, ylabel=f"validation {name}")
        for panel in panels[1 + len(names):]:
            panel.set_visible(False)
        # Below the panels, over no curve: as many columns as fit the width.
        figure.legend(*panels[0].get_legend_handles_labels(), loc="outside lower center", fontsize="small",
                      ncols=1 if narrow else min(3, len(series)), frameon=False)
        if title:
            figure.suptitle(title)
    return figure


def draw_series(panels: list, names: list[str], label: str, s: dict, smooth: int, x: str) -> None:
    scale = s["steps_per_epoch"] if x == "epochs" else 1
    legend = f"{label} (mean of {s['seeds']} seeds, 95% CI)" if s["seeds"] else label
    if s.get("non_finite_step") is not None:
        legend += f" (not finite from step {s['non_finite_step']})"
    steps = [step / scale for step in s["steps"]]
    line = panels[0].plot(steps, trailing_mean(s["loss"], smooth), label=legend, linewidth=1)[0]
    band(panels[0], steps, s, "loss", line.get_color(), smooth)
    for panel, name in zip(panels[1:], names, strict=False):
        if name in s["val"]:
            val_steps = [step / scale for step in s["val_steps"]]
            panel.plot(val_steps, s["val"][name], marker="o", markersize=3, color=line.get_color(), label=legend)
            band(panel, val_steps, s, f"val_{name}", line.get_color())


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
    return file_place_problem(out, flag)


def save_picture(series: dict[str, dict], out: Path, **options) -> str | None:
    """draw() into `out`; the reason as one line if it cannot be written."""
    problem = out_problem(out)
    if problem is None:
        try:
            draw(series, out, **options)
        except OSError as error:
            problem = f"--out {out}: cannot write there ({error.strerror or error})"
    return problem


def build_parser():
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
    parser.add_argument("--column", choices=tuple(COLUMNS), default=None, help="a journal's width: one column "
                        f"({COLUMNS['one']} in) or two ({COLUMNS['two']} in), the panels stacked in one column when "
                        "narrow (default: as wide as the panels need)")
    parser.add_argument("--width", type=float, default=None, help="the printed width in inches (default: --column's)")
    parser.add_argument("--height", type=float, default=None, help="the printed height in inches (default: to fit)")
    parser.add_argument("--dpi", type=int, default=300, help="a PNG's dots per inch (default: 300)")
    return parser


def flags_problem(args) -> str | None:
    """A contradiction or a value out of range among the flags, as one line."""
    for name in ("width", "height", "dpi"):
        if getattr(args, name) is not None and not getattr(args, name) > 0:
            return f"--{name} must be above 0, not {getattr(args, name)}"
    if args.label and len(args.label) != len(args.paths):
        return f"--label given {len(args.label)} times for {len(args.paths)} paths; give one per path"
    if args.smooth < 1:
        return f"--smooth must be at least 1, not {args.smooth}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if flags_problem(args):
        parser.error(flags_problem(args))
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
    problem = save_picture(series, args.out, title=args.title, smooth=args.smooth, x=args.x,
                           size=printed_size(args, series), dpi=args.dpi)
    if problem:
        parser.error(problem)
    for label, s in series.items():
        if s.get("non_finite_step") is not None:
            print(f"note: {label} failed: its loss or a gradient is not finite from step {s['non_finite_step']}")
    print(f"wrote {args.out}")
    return 0


def printed_size(args, series: dict[str, dict]) -> tuple[float, float] | None:
    """(width, height) in inches from --column, --width and --height; None: as the panels need."""
    width = args.width or COLUMNS.get(args.column)
    if width is None and args.height is None:
        return None
    panels = 1 + len({name for s in series.values() for name in s["val"]})
    width = width or 4.2 * min(3, panels)
    columns = 1 if width < 5 else min(3, panels)
    return width, args.height or (width / columns) * 0.75 * math.ceil(panels / columns) + 0.8


if __name__ == "__main__":
    sys.exit(run_command("plot", main))
