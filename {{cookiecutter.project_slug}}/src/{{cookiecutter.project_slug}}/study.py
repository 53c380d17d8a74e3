"""Many seeds in one command: one ordinary run per seed, then their statistics and a picture.

    python -m {{ cookiecutter.project_slug }}.study --seeds 0-4 --out studies/base
    python -m {{ cookiecutter.project_slug }}.study --seeds 0,1,2 --out studies/lr01 --jobs 2 --lr 0.01
    python -m {{ cookiecutter.project_slug }}.study --seeds 0-9 --out studies/big --summarise  # trained elsewhere

Each seed's run goes into OUT/seed-<N>/, an ordinary run folder that verify and compare accept;
their output into OUT/logs/. Every run has the same --data-seed, so all are scored on the same
validation samples. At the end: OUT/study.json (the shared config, each seed's weights_sha256 and
validation figures, and for each figure the mean, standard deviation and a 95 % confidence
interval, Student's t), OUT/study.csv (a row per seed), OUT/study.png, and a table. The headline
figure is the task's (task.HEADLINE_METRIC), or --metric.

Running the same command again continues the study: finished seeds are kept, interrupted ones
resume exactly (--resume), missing ones run. A result setting other than the study's is refused.
With --summarise nothing is trained: the seed folders (from a SLURM array, say) are summarised.
"""

from __future__ import annotations

import csv
import functools
import io
import re
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from .config import EXECUTION_ONLY, Config, build_parser, parse_command_line
from .engine.cli import make_parser, prog, run_command
from .engine.cli import refuse as refuse_with
from .engine.environment import differences
from .engine.files import atomic_write_text, file_in_the_way, unwritable_reason, write_json
from .engine.launch import launch_training
from .engine.run_folder import lock_folder
from .engine.runs import RunError, read_json, read_run
from .engine.signals import PASSED_ON
from .engine.statistics import statistics_of
from .utils.repro import MAX_SEED

SET_BY_THE_STUDY = ("--seed", "--out", "--resume", "--overwrite", "--stop-after-steps")


refuse = functools.partial(refuse_with, "study")  # one line on stderr, exit 2


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


def training_settings(flags: list[str]) -> dict:
    """The training flags of the study as train would read them; train's refusals, in one line."""
    for flag in flags:
        if flag.split("=")[0] in SET_BY_THE_STUDY:
            refuse(f"{flag.split('=')[0]} is set by the study for each run; leave it out")
    parser = build_parser()
    parser.error = refuse
    return parse_command_line(flags, parser)[0]  # --config FILE's settings too: study.json records them


def result_differences(a: dict, b: dict) -> list[str]:
    """The result settings that differ between two studies' shared settings. With --early-stop,
    the figure --keep-best watches decides where each run ends: a result setting then."""
    early_stop = a.get("early_stop") or b.get("early_stop")
    free = [name for name in EXECUTION_ONLY if not (name == "keep_best" and early_stop)]
    return differences(a, b, tuple(key for key in {**a, **b} if key not in free))


def check_study_folder(out: Path, shared: dict) -> dict | None:
    """The study already in `out` (refusing one with other result settings), or None."""
    blocking = file_in_the_way(out)
    if blocking is not None:
        refuse(f"--out {out}: {blocking} is a file, not a folder")
    if not (out / "study.json").exists():
        if out.is_dir() and any(out.iterdir()):
            refuse(f"--out {out} is not empty and holds no study (study.json); choose another --out")
        if out.exists() and not out.is_dir():
            refuse(f"--out {out} is a file, not a folder")
        return None
    try:
        recorded = read_json(out / "study.json", required=True)
    except RunError as error:
        refuse(str(error))
    changed = result_differences(recorded["config"], shared)
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


def launch_seed(seed: int, out: Path, flags: list[str]) -> tuple | None:
    """Launches what one seed needs (see command_for); None when its run is already finished."""
    action, args = command_for(seed, out, flags)
    print(f"seed {seed}: {action}", flush=True)
    if not args:
        return None
    log = open(out / "logs" / f"seed-{seed}.log", "a", encoding="utf-8")  # closed when the run ends
    return launch_training(*args, stdout=log, stderr=log), log, time.perf_counter()


def finished_line(seed: int, out: Path, seconds: float, metric: str | None) -> str:
    summary = read_json(out / f"seed-{seed}" / "summary.json", required=True)
    name = metric or summary.get("headline_metric", "loss")
    value = summary.get(f"val_{name}")
    return f"seed {seed}: finished in {seconds:.1f} s" + (f", val_{name} {value:.4f}" if value is not None else "")


def run_seeds(seeds: list[int], out: Path, flags: list[str], jobs: int, metric: str | None) -> list[int]:
    """Runs what each seed needs, `jobs` at a time; returns the seeds whose run failed. A SIGTERM
    or Ctrl-C is passed on, once, to the runs (each stops with a checkpoint), then the study stops
    with one line. Passed on as signals.PASSED_ON: a Ctrl-C typed in a terminal reaches the runs
    too, and that SIGINT with this one is one stop request, not the two that mean "now"."""
    waiting, running, failed, stop = list(seeds), {}, [], []
    previous = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while waiting or running:
            while waiting and len(running) < jobs and not stop:
                seed = waiting.pop(0)
                launched = launch_seed(seed, out, flags)
                if launched is not None:
                    running[seed] = launched
            if stop and stop[-1] is not None:  # pass the stop on, once, as a signal the run takes as one request
                for process, _, _ in running.values():
                    process.send_signal(PASSED_ON or stop[0])  # a terminal's Ctrl-C reached the runs already
                stop.append(None)
            failed += reap(running, out, metric, quiet=bool(stop))
            if stop and not running:
                print(f"{prog('study')}: stopped ({signal.Signals(stop[0]).name}): each seed that was training "
                      f"stopped after its step with a checkpoint (its log in {out / 'logs'}); the same command "
                      "goes on from there", file=sys.stderr, flush=True)
                sys.exit(128 + stop[0])
            time.sleep(0.05)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return failed


def reap(running: dict, out: Path, metric: str | None, quiet: bool) -> list[int]:
    """Removes the runs that have ended from `running`, saying how each went; the seeds that failed."""
    failed = []
    for seed, (process, log, started) in list(running.items()):
        if process.poll() is not None:  # a state, not a time: this run has ended
            log.close()
            del running[seed]
            if process.returncode != 0:
                failed.append(seed)
            elif not quiet:
                print(finished_line(seed, out, time.perf_counter() - started, metric), flush=True)
    return failed


def summarise(out: Path, seeds: list[int], shared: dict, seconds: float | None, metric: str | None) -> dict:
    """study.json and study.csv from the seeds' run folders."""
    summaries = {seed: read_run(out / f"seed-{seed}").summary for seed in seeds}
    unfinished = [seed for seed, summary in summaries.items() if summary is None]
    if unfinished:
        refuse(f"the run of seed {unfinished[0]} in {out / f'seed-{unfinished[0]}'} has not finished (no summary.json)")
    first = summaries[seeds[0]]
    figures = [f"val_{name}" for name in first.get("metrics", ["loss", "accuracy"])]
    headline = f"val_{metric or first.get('headline_metric', 'loss')}"
    if headline not in figures:
        refuse(f"--metric {headline[4:]}: the runs record {', '.join(name[4:] for name in figures)}")
    per_seed = [{"seed": seed, "weights_sha256": s["weights_sha256"], **{name: s[name] for name in figures},
                 "steps": s["steps"], "train_seconds": s["train_seconds"]} for seed, s in summaries.items()]
    study = {"config": shared, "seeds": seeds, "headline": headline, "runs": per_seed,
             "statistics": {name: statistics_of([row[name] for row in per_seed]) for name in figures},
             "study_seconds": seconds}
    write_json(out / "study.json", study)
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=list(per_seed[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({**row, **{name: repr(row[name]) for name in figures}} for row in per_seed)
    atomic_write_text(out / "study.csv", table.getvalue())
    return study


def print_table(study: dict) -> None:
    headline = study["headline"]
    others = [name for name in study["statistics"] if name != headline]
    print(f"{'seed':>6}  " + "  ".join(f"{name:>14}" for name in (headline, *others)) + "  weights")
    for row in study["runs"]:
        print(f"{row['seed']:>6}  " + "  ".join(f"{row[name]:>14.4f}" for name in (headline, *others))
              + f"  {row['weights_sha256'][:12]}")
    stats = [study["statistics"][name] for name in (headline, *others)]
    if stats[0]["std"] is not None:
        print(f"{'mean':>6}  " + "  ".join(f"{s['mean']:>14.4f}" for s in stats))
        print(f"{'± std':>6}  " + "  ".join(f"{s['std']:>14.4f}" for s in stats))
        low, high = stats[0]["ci95"]
        print(f"{headline}: {stats[0]['mean']:.4f}, 95 % confidence interval [{low:.4f}, {high:.4f}] "
              f"over {len(study['runs'])} seeds")


def shared_config_of_runs(out: Path, seeds: list[int]) -> dict:
    """--summarise: the settings the seeds' runs share (all but the seed), refusing runs that differ."""
    configs = {}
    for seed in seeds:
        try:
            configs[seed] = Config.from_dict(read_run(out / f"seed-{seed}").config)[0].to_dict()
        except RunError as error:
            refuse(str(error))
        except (TypeError, ValueError) as error:
            refuse(f"{out / f'seed-{seed}' / 'config.json'}: {error}")
        if configs[seed]["seed"] != seed:
            refuse(f"{out / f'seed-{seed}'} holds the run of seed {configs[seed]['seed']}, not {seed}")
    shared = {key: value for key, value in configs[seeds[0]].items() if key != "seed"}
    for seed, config in configs.items():
        changed = result_differences(shared, {key: value for key, value in config.items() if key != "seed"})
        if changed:
            refuse(f"the runs of seeds {seeds[0]} and {seed} differ in more than the seed: {'; '.join(changed)}")
    return shared


def main(argv: list[str] | None = None) -> int:
    parser = make_parser("study", "Train one run per seed and summarise them; the other flags are train's "
                         f"({prog('train')} --help)")
    parser.add_argument("--seeds", required=True, help="seeds and ranges, such as 0-4 or 0,1,7")
    parser.add_argument("--out", type=Path, required=True, help="the study folder")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default: 1)")
    parser.add_argument("--metric", default=None, help="the headline figure (default: the task's HEADLINE_METRIC)")
    parser.add_argument("--summarise", action="store_true", help="train nothing: summarise the seed folders "
                        "already in --out, trained elsewhere (default: off)")
    args, flags = parser.parse_known_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as error:
        refuse(str(error))
    if args.jobs < 1:
        refuse(f"--jobs must be at least 1, not {args.jobs}")
    if args.summarise:
        if flags:
            refuse(f"--summarise trains nothing: leave out {flags[0]}")
        if not args.out.is_dir():
            refuse(f"--summarise: --out {args.out} {'is a file' if args.out.exists() else 'does not exist'}; "
                   "give the study folder that holds the seed-<N> runs")
        shared, seconds = shared_config_of_runs(args.out, seeds), None
    else:
        shared, seconds = train_seeds(args, seeds, flags)
        if seconds is None:
            return 1
    study = summarise(args.out, seeds, shared, seconds, args.metric)
    print_table(study)
    written = [args.out / "study.json", args.out / "study.csv"]
    try:
        from .plot import save_picture, study_series

        problem = save_picture({args.out.name: study_series(args.out)}, args.out / "study.png",
                               title=f"{args.out.name}: {len(seeds)} seeds")
        if problem:
            print(f"no study.png: {problem}")
        else:
            written.append(args.out / "study.png")
    except ImportError:
        print("no study.png: matplotlib is not installed (python -m pip install matplotlib)")
    except RunError as error:  # the seeds' runs cannot be drawn as one (--early-stop ended them at other steps)
        print(f"no study.png: {error}")
    print("wrote " + ", ".join(str(path) for path in written))
    return 0


def shared_settings(config: Config) -> dict:
    """What every seed's run records as its config, but the seed: study.json's "config". With
    --init-from, the file's weights_sha256, as each run records it as it starts (one line and exit 2
    for a file that holds no weights)."""
    if config.init_from != "none":
        from .engine.checkpoint import read_model_weights  # here: torch, only for a study that needs it
        from .utils.repro import state_dict_sha256

        try:
            weights, _ = read_model_weights(Path(config.init_from))
        except ValueError as error:
            refuse(f"--init-from: {error}")
        config = replace(config, init_from_sha256=state_dict_sha256(weights))
    return {key: value for key, value in config.to_dict().items() if key != "seed"}


def refuse_if_locked(out: Path) -> None:
    problem = lock_folder(out)
    if problem:
        refuse(problem)


def train_seeds(args, seeds: list[int], flags: list[str]) -> tuple[dict, float | None]:
    """Trains what each seed needs; (the shared settings, seconds), or seconds None if a run failed."""
    config = Config(**training_settings(flags))
    if config.problem():
        refuse(config.problem())
    if config.parallel == "fsdp":  # train would refuse it in every run; say so once, before any starts
        refuse("--parallel fsdp needs torchrun, and the study starts each seed as one plain process: leave it out, "
               "or train each seed under torchrun (docs/distributed.md)")
    shared = shared_settings(config)
    recorded = check_study_folder(args.out, shared)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        refuse_if_locked(args.out)  # one study at a time: a second launch would start a second writer per seed
        (args.out / "logs").mkdir(exist_ok=True)
        if recorded is None:
            write_json(args.out / "study.json", {"config": shared, "seeds": seeds, "runs": None})
    except OSError as error:
        refuse(f"--out {args.out}: cannot write there ({unwritable_reason(args.out, error)})")
    start = time.perf_counter()
    failed = run_seeds(seeds, args.out, flags, args.jobs, args.metric)
    if failed:
        print(f"{prog('study')}: error: the run of seed {failed[0]} failed; see "
              f"{args.out / 'logs' / f'seed-{failed[0]}.log'}", file=sys.stderr)
        return shared, None
    return shared, time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(run_command("study", main))
