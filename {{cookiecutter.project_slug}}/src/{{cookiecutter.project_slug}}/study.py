"""Many seeds in one command: one ordinary run per seed, then their statistics and a picture.

    python -m {{ cookiecutter.project_slug }}.study --seeds 0-4 --out studies/base
    python -m {{ cookiecutter.project_slug }}.study --seeds 0,1,2 --out studies/lr01 --jobs 2 --lr 0.01

Each seed's run goes into OUT/seed-<N>/, an ordinary run folder that verify and compare accept;
their output into OUT/logs/. Every run has the same --data-seed, so all are scored on the same
validation samples. At the end: OUT/study.json (the shared config, each seed's weights_sha256,
val_loss and val_accuracy, and for each metric the mean, standard deviation and a 95 %
confidence interval, Student's t), OUT/study.csv (a row per seed), OUT/study.png, and a table.

Running the same command again continues the study: finished seeds are kept, interrupted ones
resume exactly (--resume), missing ones run. A result setting other than the study's is refused.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import re
import signal
import sys
import time
from pathlib import Path

from .checkpoint import atomic_write_text
from .config import EXECUTION_ONLY, Config, build_parser
from .config import PROG as TRAIN_PROG
from .runs import RunError, differences, read_json, read_run, start_training, write_json
from .utils.repro import MAX_SEED

PROG = "python -m {{ cookiecutter.project_slug }}.study"
SET_BY_THE_STUDY = ("--seed", "--out", "--resume", "--overwrite", "--stop-after-steps")
METRICS = ("val_accuracy", "val_loss")
# Student's t for a two-sided 95 % interval, by degrees of freedom (from its tables); beyond 30 the
# value moves from 2.042 towards the normal 1.960, taken here at 40, 60 and 120.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101,
         19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052,
         28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def refuse(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_seeds(text: str) -> list[int]:
    """'0,1,2', '0-9' or '0-4,7' -> a list of seeds; ValueError (one line) for anything else."""
    seeds = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?", part)
        if match is None:
            raise ValueError(f"--seeds {text!r}: {part.strip()!r} is not a seed or a range such as 0-9")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first or last > MAX_SEED:
            raise ValueError(f"--seeds {text!r}: {part.strip()!r} is not a range of seeds in 0 .. {MAX_SEED}")
        seeds += range(first, last + 1)
    duplicates = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if duplicates:
        raise ValueError(f"--seeds {text!r} names seed {duplicates[0]} twice")
    return seeds


def t_975(degrees: int) -> float:
    known = max(d for d in T_975 if d <= degrees)
    return T_975[known] if degrees <= 120 else 1.960


def statistics_of(values: list[float]) -> dict[str, object]:
    """Mean, sample standard deviation, and the 95 % confidence interval of the mean (Student's t)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return {"mean": mean, "std": None, "ci95": None}
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_975(n - 1) * std / math.sqrt(n)
    return {"mean": mean, "std": std, "ci95": [mean - half, mean + half]}


def training_settings(flags: list[str]) -> dict:
    """The training flags of the study as train would read them; train's refusals, in one line."""
    for flag in flags:
        if flag.split("=")[0] in SET_BY_THE_STUDY:
            refuse(f"{flag.split('=')[0]} is set by the study for each run; leave it out")
    parser = build_parser()
    parser.error = lambda message: refuse(message.replace(TRAIN_PROG, PROG))
    args = parser.parse_args(flags)
    return {name: value for name, value in vars(args).items() if name in Config.__dataclass_fields__}


def check_study_folder(out: Path, shared: dict) -> dict | None:
    """The study already in `out` (refusing one with other result settings), or None."""
    if not (out / "study.json").exists():
        if out.exists() and any(out.iterdir()):
            refuse(f"--out {out} is not empty and holds no study (study.json); choose another --out")
        return None
    try:
        recorded = read_json(out / "study.json", required=True)
    except RunError as error:
        refuse(str(error))
    results = tuple(key for key in {**recorded["config"], **shared} if key not in EXECUTION_ONLY)
    changed = differences(recorded["config"], shared, results)
    if changed:
        refuse(f"the study in {out} was made with other settings ({'; '.join(changed)}); choose another --out")
    return recorded


def command_for(seed: int, out: Path, flags: list[str]) -> tuple[str, list[str]]:
    """What to do for one seed: keep a finished run, resume an interrupted one, or start it."""
    run = out / f"seed-{seed}"
    if (run / "summary.json").exists():
        return "kept", []
    if any((run / "checkpoints").glob("step-*.pt")):
        return "resumed", [*flags, "--out", str(run), "--resume"]
    return "started", [*flags, "--seed", str(seed), "--out", str(run), "--overwrite"]


def start_seed(seed: int, out: Path, flags: list[str]) -> tuple | None:
    """Starts what one seed needs (see command_for); None when its run is already finished."""
    action, args = command_for(seed, out, flags)
    print(f"seed {seed}: {action}", flush=True)
    if not args:
        return None
    log = open(out / "logs" / f"seed-{seed}.log", "a", encoding="utf-8")  # closed when the run ends
    return start_training(*args, stdout=log, stderr=log), log


def run_seeds(seeds: list[int], out: Path, flags: list[str], jobs: int) -> list[int]:
    """Runs what each seed needs, `jobs` at a time; returns the seeds whose run failed. A SIGTERM
    or Ctrl-C is passed on, once, to the runs (each stops with a checkpoint), then the study stops."""
    waiting, running, failed, stop = list(seeds), {}, [], []
    previous = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while waiting or running:
            while waiting and len(running) < jobs and not stop:
                seed = waiting.pop(0)
                started = start_seed(seed, out, flags)
                if started is not None:
                    running[seed] = started
            if stop and stop[-1] is not None:  # pass the signal on once; a second one would skip the checkpoint
                for process, _ in running.values():
                    process.send_signal(stop[0])
                stop.append(None)
            for seed, (process, log) in list(running.items()):
                if process.poll() is not None:  # a state, not a time: this run has ended
                    log.close()
                    failed += [seed] if process.returncode != 0 else []
                    del running[seed]
            if stop and not running:
                sys.exit(128 + stop[0])
            time.sleep(0.05)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return failed


def summarise(out: Path, seeds: list[int], shared: dict, seconds: float) -> dict:
    """study.json and study.csv from the seeds' run folders."""
    runs = {seed: read_run(out / f"seed-{seed}").summary for seed in seeds}
    per_seed = [{"seed": seed, "weights_sha256": s["weights_sha256"], "val_loss": s["val_loss"],
                 "val_accuracy": s["val_accuracy"], "steps": s["steps"], "train_seconds": s["train_seconds"]}
                for seed, s in runs.items()]
    study = {"config": shared, "seeds": seeds, "runs": per_seed,
             "statistics": {metric: statistics_of([row[metric] for row in per_seed]) for metric in METRICS},
             "study_seconds": seconds}
    write_json(out / "study.json", study)
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=list(per_seed[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({**row, "val_loss": repr(row["val_loss"]), "val_accuracy": repr(row["val_accuracy"])}
                     for row in per_seed)
    atomic_write_text(out / "study.csv", table.getvalue())
    return study


def print_table(study: dict) -> None:
    print(f"{'seed':>6}  {'val_accuracy':>12}  {'val_loss':>10}  weights")
    for row in study["runs"]:
        print(f"{row['seed']:>6}  {row['val_accuracy']:>12.4f}  {row['val_loss']:>10.4f}  {row['weights_sha256'][:12]}")
    accuracy, loss = (study["statistics"][metric] for metric in METRICS)
    if accuracy["std"] is not None:
        print(f"{'mean':>6}  {accuracy['mean']:>12.4f}  {loss['mean']:>10.4f}")
        print(f"{'± std':>6}  {accuracy['std']:>12.4f}  {loss['std']:>10.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Train one run per seed and summarise them; the "
                                     "other flags are train's (python -m {{ cookiecutter.project_slug }}.train --help)",
                                     allow_abbrev=False)
    parser.add_argument("--seeds", required=True, help="seeds and ranges, such as 0-4 or 0,1,7")
    parser.add_argument("--out", type=Path, required=True, help="the study folder")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default: 1)")
    parser.error = lambda message: refuse(message)
    args, flags = parser.parse_known_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as error:
        refuse(str(error))
    if args.jobs < 1:
        refuse(f"--jobs must be at least 1, not {args.jobs}")
    config = Config(**training_settings(flags))
    if config.problem():
        refuse(config.problem())
    shared = {key: value for key, value in config.to_dict().items() if key != "seed"}
    recorded = check_study_folder(args.out, shared)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    if recorded is None:
        write_json(args.out / "study.json", {"config": shared, "seeds": seeds, "runs": None})

    start = time.perf_counter()
    failed = run_seeds(seeds, args.out, flags, args.jobs)
    if failed:
        print(f"{PROG}: error: the run of seed {failed[0]} failed; see {args.out / 'logs' / f'seed-{failed[0]}.log'}",
              file=sys.stderr)
        return 1
    study = summarise(args.out, seeds, shared, time.perf_counter() - start)
    print_table(study)
    try:
        from .plot import draw, study_series

        draw({}, {str(args.out): study_series(args.out)}, args.out / "study.png")
    except ImportError:
        print("no study.png: matplotlib is not installed (python -m pip install matplotlib)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
