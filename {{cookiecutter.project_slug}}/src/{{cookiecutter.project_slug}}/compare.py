"""Compares two run folders: settings, environments, the first step where they part, final results.

    python -m {{ cookiecutter.project_slug }}.compare runs/a runs/b [--plot losses.png]

Exit 0 when the runs are identical (every metrics row and the weight hash), 1 otherwise,
2 for a folder that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import EXECUTION_ONLY
from .runs import ENVIRONMENT_KEYS, RunError, differences, first_divergence, read_run

PROG = "python -m {{ cookiecutter.project_slug }}.compare"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Compare two runs.", allow_abbrev=False)
    parser.add_argument("run_a", type=Path, metavar="RUN_A")
    parser.add_argument("run_b", type=Path, metavar="RUN_B")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write both loss curves to this PNG (matplotlib)")
    parser.error = lambda message: parser.exit(2, f"{PROG}: error: {message}\n")
    args = parser.parse_args(argv)
    try:
        a, b = read_run(args.run_a), read_run(args.run_b)
    except RunError as error:
        parser.error(str(error))

    print(f"A: {a.path}\nB: {b.path}")
    for title, lines in (("config differences", differences(a.config, b.config)),
                         ("environment differences", differences(a.environment, b.environment, ENVIRONMENT_KEYS))):
        print(f"{title}:" + ("" if lines else " none"))
        for line in lines:
            print(f"  {line}")
    divergence = first_divergence(a.metrics, b.metrics)
    print(f"first divergence: {divergence or 'none, every metrics row is identical'}")
    print(f"{'':16s}{'A':>24s}{'B':>24s}")
    for key in ("val_loss", "val_accuracy", "steps"):
        value_a, value_b = ((run.summary or {}).get(key, "(unfinished)") for run in (a, b))
        print(f"{key:16s}{str(value_a)[:22]:>24s}{str(value_b)[:22]:>24s}")
    for label, run in (("A", a), ("B", b)):
        print(f"weights_sha256 {label} {run.weights or '(unfinished)'}")
    if args.plot:
        plot(a, b, args.plot)
    # Execution-only settings (workers, checkpoint interval) may differ: they change no result.
    result_settings = tuple(key for key in dict.fromkeys([*a.config, *b.config]) if key not in EXECUTION_ONLY)
    same_settings = not differences(a.config, b.config, result_settings)
    identical = same_settings and divergence is None and a.weights is not None and a.weights == b.weights
    print("IDENTICAL" if identical else "DIFFERENT")
    return 0 if identical else 1


def plot(a, b, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is not installed (python -m pip install matplotlib)")
        return
    figure, axes = plt.subplots(figsize=(7, 4))
    for run, label in ((a, "A"), (b, "B")):
        rows = [row for row in run.metrics if row["split"] == "train"]
        axes.plot([int(r["step"]) for r in rows], [float(r["loss"]) for r in rows], label=f"{label}: {run.path}")
    axes.set_xlabel("step")
    axes.set_ylabel("training loss")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"loss curves written to {path}")


if __name__ == "__main__":
    sys.exit(main())
