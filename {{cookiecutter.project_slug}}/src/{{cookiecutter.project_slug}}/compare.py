"""Compares two run folders: settings, environments (each difference explained: whether it is known
to change bits, and what to do), the first step where they part, final results.

    python -m {{ cookiecutter.project_slug }}.compare runs/a runs/b [--plot curves.png]

Exit 0 when the runs are identical (the same result settings, the same world sizes, every
metrics row and the weight hash), 1 otherwise, 2 for a folder that cannot be read. Runs that differ
only in their evaluation settings (--eval-every, --val-batch-size) and have the same weights and
training rows are told apart as that. An environment entry that follows from a setting that
differs (the hash seed from --seed, the threads from --threads) is named so, with no advice. A run
resumed with another world size says so (world_sizes.json), and from which step; two runs made with
the same --invariant-shards may be IDENTICAL on other numbers of processes (that is the mode's
promise). A setting that one run did not record (it is older than the setting) counts as its default.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .config import EXECUTION_ONLY, Config, effect_of, flag
from .engine.cli import make_parser, run_command
from .engine.environment import ENVIRONMENT_KEYS, differences, explained_differences
from .engine.runs import Run, RunError, first_divergence, read_run
from .engine.world_sizes import describe

# Environment entries that training sets from a setting: when the setting differs, so do they.
FROM_SETTING = {"python_hash_seed": "seed", "determinism": "deterministic", "intra_op_threads": "threads",
                "cpu_kernel_variables": "cpu_kernels", "device": "device", "world_size": "world_size"}


def environment_lines(a: Run, b: Run, config_a: dict, config_b: dict) -> list[str]:
    """explained_differences, except for the entries that follow from a setting that differs."""
    follows = {name: setting for name, setting in FROM_SETTING.items()
               if config_a.get(setting) != config_b.get(setting) and a.environment.get(name) != b.environment.get(name)}
    lines = [f"{name}: {a.environment.get(name)!r} -> {b.environment.get(name)!r}: follows from "
             f"{flag(setting)}, which differs" for name, setting in follows.items()]
    return lines + explained_differences(a.environment, b.environment,
                                         tuple(key for key in ENVIRONMENT_KEYS if key not in follows))


def settings(run: Run) -> dict:
    """The run's settings, with the defaults of those it did not record; RunError (one line) for a
    config.json that verify and --resume would refuse (a hand-edited value, a setting this code lacks)."""
    try:
        return Config.from_dict(run.config)[0].to_dict()
    except (TypeError, ValueError) as error:
        raise RunError(f"{run.path / 'config.json'}: {error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = make_parser("compare", "Compare two runs.")
    parser.add_argument("run_a", type=Path, metavar="RUN_A")
    parser.add_argument("run_b", type=Path, metavar="RUN_B")
    parser.add_argument("--plot", type=Path, metavar="FILE", help="draw both runs into this picture (.png, .pdf or "
                        ".svg; needs matplotlib)")
    args = parser.parse_args(argv)
    try:
        a, b = read_run(args.run_a), read_run(args.run_b)
        config_a, config_b = settings(a), settings(b)
    except RunError as error:
        parser.error(str(error))
    if args.plot:
        from .plot import out_problem

        if out_problem(args.plot, "--plot"):
            parser.error(out_problem(args.plot, "--plot"))

    print(f"A: {a.path}\nB: {b.path}")
    for title, lines in (("config differences", differences(config_a, config_b)),
                         ("environment differences", environment_lines(a, b, config_a, config_b))):
        print(f"{title}:" + ("" if lines else " none"))
        for line in lines:
            print(f"  {line}")
    for label, run, config in (("A", a, config_a), ("B", b, config_b)):
        print(f"world size {label}: {describe(run.world_sizes, config.get('world_size', 1))}")
    divergence = first_divergence(a, b)
    print(f"first divergence: {divergence or 'none, every metrics row is identical'}")
    print(f"{'':16s}{'A':>24s}{'B':>24s}")
    for key in ("steps", *(f"val_{name}" for name in dict.fromkeys([*a.metric_names, *b.metric_names]))):
        value_a, value_b = ((run.summary or {}).get(key, "(unfinished)") for run in (a, b))
        print(f"{key:16s}{str(value_a)[:22]:>24s}{str(value_b)[:22]:>24s}")
    for label, run in (("A", a), ("B", b)):
        print(f"weights_sha256 {label} {run.weights or '(unfinished)'}")
    if args.plot:
        draw_both(a, b, args.plot)
    line, status = verdict(a, b, config_a, config_b, divergence)
    print(line)
    return status


def verdict(a: Run, b: Run, config_a: dict, config_b: dict, divergence: str | None) -> tuple[str, int]:
    """The last line and the exit status: IDENTICAL (0); DIFFERENT evaluations only (1) when only
    evaluation settings differ and the weights and training rows are the same; DIFFERENT (1)."""
    # Execution-only settings (workers, checkpoint interval) may differ: they change no result.
    # --invariant-shards, the same in both: the number of processes changes no bit (engine/invariant.py).
    anywhere = bool(config_a.get("invariant_shards")) and config_a.get("invariant_shards") == config_b.get(
        "invariant_shards")
    results = tuple(key for key in dict.fromkeys([*config_a, *config_b])
                    if key not in EXECUTION_ONLY and not (anywhere and key == "world_size"))
    same_weights = (anywhere or a.world_sizes == b.world_sizes) and a.weights is not None and a.weights == b.weights
    if same_weights and divergence is None and not differences(config_a, config_b, results):
        return "IDENTICAL", 0
    evaluation = [name for name in results if effect_of_or_none(name) == "evaluation"]
    differing = [name for name in evaluation if config_a.get(name) != config_b.get(name)]
    if differing and same_weights and train_rows(a) == train_rows(b) \
            and not differences(config_a, config_b, tuple(name for name in results if name not in evaluation)):
        return (f"DIFFERENT evaluations only: the weights and every training row are identical; "
                f"{', '.join(map(flag, differing))} decide(s) when and how the runs evaluated, never what they "
                "trained"), 1
    return "DIFFERENT", 1


def effect_of_or_none(name: str) -> str | None:
    """A setting's effect; None for one this code does not know (recorded by another version)."""
    return effect_of(name) if name in Config.__dataclass_fields__ else None


def train_rows(run: Run) -> list[dict]:
    return [row for row in run.metrics if row["split"] == "train"]


def draw_both(a: Run, b: Run, path: Path) -> None:
    from .plot import run_series, save_picture

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("no plot: matplotlib is not installed (python -m pip install matplotlib)")
        return
    problem = save_picture({f"A: {a.path}": run_series(a), f"B: {b.path}": run_series(b)}, path)
    print(f"no plot: {problem}" if problem else f"curves written to {path}")


if __name__ == "__main__":
    sys.exit(run_command("compare", main))
