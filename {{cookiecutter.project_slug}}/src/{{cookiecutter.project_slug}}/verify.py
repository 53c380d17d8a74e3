"""Re-runs a recorded run in a fresh process and says whether it reproduced, step by step.

    python -m {{ cookiecutter.project_slug }}.verify runs/a              # the whole run
    python -m {{ cookiecutter.project_slug }}.verify runs/a --steps 20   # only its first 20 steps

The re-run goes into a scratch folder (RUN_DIR is never touched) with the flags recorded in
RUN_DIR/config.json (a setting the run did not record, being older than it, takes its default);
a run made by torchrun on one machine is re-run under torchrun, with its world size. A run that
was resumed with another world size (world_sizes.json) is re-run the same way: stopped at each
step where its world size changed, and resumed with the next one. A run made with
--invariant-shards gives the same bits on any world size that divides its shards: `--world-size N`
re-runs it on N processes (1: a plain process, no torchrun), in one launch. Prints
REPRODUCED and the weight hash, exit 0; or the first step where the two runs part (metric and
both values), exit 1. Before it re-runs, it lists what differs between the machine that made the
run and this one (CPU instruction sets, library versions, GPU, threads), each with whether it is
known to change bits and what to do: bitwise equality is promised only on the same machine and
software stack. A run made with --cpu-kernels portable recorded its machine's fingerprint: where
the machines differ, verify computes this one's and names the first operation whose bits differ
(the data, NumPy, a kernel, an optimizer, the task's first step). A run that cannot be verified (a
bad RUN_DIR, settings this code does not know, a run from another architecture or device, a re-run
that fails): one line, exit 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from .engine.cli import make_parser, refuse, run_command
from .engine.environment import differences, environment_differences
from .engine.files import scratch_problem
from .engine.launch import launch_training
from .engine.runs import Run, RunError, first_divergence, read_run
from .engine.world_sizes import describe


def main(argv: list[str] | None = None) -> int:
    parser = make_parser("verify", "Re-run a recorded run and compare step by step.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--steps", type=int, default=None, help="verify only the first N optimizer steps")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder of the re-run")
    parser.add_argument("--world-size", type=processes, default=None, metavar="N",
                        help="re-run on N processes: a run made with --invariant-shards, on a divisor of its shards "
                             "(default: the world size it recorded)")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be at least 1, not {args.steps}")
    try:
        original = read_run(args.run_dir)
    except RunError as error:
        parser.error(str(error))
    bad = original.non_finite_step
    if bad is not None and (args.steps is None or args.steps >= bad) and original.summary is None:
        parser.error(f"{args.run_dir} stopped at step {bad} on a loss or gradient that is not finite: it failed; "
                     f"verify its steps before it with --steps {bad - 1}" if bad > 1 else
                     f"{args.run_dir} stopped at its first step on a loss or gradient that is not finite: it failed")
    if args.steps is None and original.summary is None:
        parser.error(f"{args.run_dir} did not finish (no summary.json); verify its first steps with --steps N")
    recorded_steps = len(original.train_losses)
    if args.steps is not None and args.steps > recorded_steps:  # never claim steps that do not exist
        parser.error(f"--steps {args.steps}: the run in {args.run_dir} recorded {recorded_steps} step"
                     f"{'' if recorded_steps == 1 else 's'}")
    if scratch_problem():  # the re-run goes into a scratch folder
        parser.error(scratch_problem())

    refusal, differing = machine_check(original, args.world_size)
    if refusal is not None:
        refuse("verify", refusal)
    if differing:
        print("this machine differs from the one that made the run:\n" + "\n".join(f"  {line}" for line in differing))
        print("\n".join(fingerprint_lines(original)))
    what = (f"the first {args.steps} of its {recorded_steps} steps" if args.steps
            else f"all {recorded_steps} steps")
    print(f"re-running {what} of {args.run_dir} in a fresh process...", flush=True)
    code, lines = verify(original, args.steps, keep=args.keep, world_size=args.world_size)
    if code == 2:
        refuse("verify", lines[-1])
    print("\n".join(lines))
    return code


def processes(text: str) -> int:
    """--world-size: a number of processes, at least 1."""
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of processes, at least 1, not {text!r}")
    return int(text)


def machine_check(original: Run, world_size: int | None = None) -> tuple[str | None, list[str]]:
    """(why this machine cannot re-run `original` at all, on `world_size` processes if given, or
    None; the machine's entries that differ from the recorded ones, each explained), known before
    any re-run."""
    from .config import Config  # imported here: torch, which a bad RUN_DIR never needs
    from .engine.environment import MACHINE_KEYS, explained_differences, incompatibility, machine_environment
    from .utils.device import select_device

    try:
        config = Config.from_dict(original.config)[0]
    except (TypeError, ValueError) as error:
        return f"{original.path / 'config.json'}: {error}", []
    refusal = (incompatibility(original.environment, config.cpu_kernels == "portable") or init_from_problem(config)
               or (world_size_problem(original, world_size) if world_size is not None else None))
    if refusal is not None:
        return f"cannot verify {original.path}: {refusal}", []
    try:
        device = select_device(config.device)  # as the re-run will choose it
    except ValueError as error:
        return f"cannot verify {original.path}: {error}", []
    return None, explained_differences(original.environment, machine_environment(config, device), MACHINE_KEYS)


def world_size_problem(original: Run, world_size: int) -> str | None:
    """Why `original` cannot be re-run on `world_size` processes to the same bits, or None."""
    from .config import Config  # imported here: torch, which a bad RUN_DIR never needs

    config = Config.from_dict(original.config)[0]
    if world_size == config.world_size and not original.world_sizes:
        return None
    if not config.invariant_shards:
        return (f"--world-size {world_size}: {original.path} ran on "
                f"{describe(original.world_sizes, config.world_size)} without --invariant-shards, and its bits "
                "depend on that: verify it on the same number")
    if config.invariant_shards % world_size:
        return (f"--world-size {world_size} does not divide the run's --invariant-shards {config.invariant_shards}: "
                "verify it on a divisor")
    return None


def fingerprint_lines(original: Run) -> list[str]:
    """For a run that recorded its machine's fingerprint (--cpu-kernels portable): this machine's,
    computed now for the run's settings, against it, naming the first operation that differs."""
    from .engine.fingerprint import RUN_FILE, compare_fingerprints, machine_fingerprint, read_fingerprint

    if not (original.path / RUN_FILE).exists():
        return []
    try:
        recorded = read_fingerprint(original.path / RUN_FILE)
        lines, _ = compare_fingerprints(machine_fingerprint(("portable",), original.config), recorded)
    except (RuntimeError, ValueError) as error:
        return [f"  fingerprint: not compared: {error}"]
    return [f"the operations at fixed inputs, this machine against the run's {RUN_FILE}:",
            *(f"  {line}" for line in lines if line.startswith("portable:"))]


def verify(original: Run, steps: int | None = None, keep: bool = False,
           world_size: int | None = None) -> tuple[int, list[str]]:
    """Re-runs `original` in a fresh process in a scratch folder and compares: (exit code, report).
    Exit code 2 means it could not be verified; the last line then says why. `world_size`: re-run
    on that many processes, in one launch (a run made with --invariant-shards; None: as recorded)."""
    from .config import Config, config_to_flags  # imported here: torch, which a bad RUN_DIR never needs

    try:
        config, added = Config.from_dict(original.config)
    except (TypeError, ValueError) as error:
        return 2, [f"{original.path / 'config.json'}: {error}"]
    notes = ([f"note: the run did not record {', '.join(added)} (it is older than these settings): "
              "re-run with their defaults"] if added else [])
    anywhere = world_size is not None and bool(config.invariant_shards)  # one launch on `world_size` processes
    if anywhere:
        notes.append(f"note: the run ran on {describe(original.world_sizes, config.world_size)}; with "
                     f"--invariant-shards {config.invariant_shards} it is re-run on {world_size} "
                     f"process{'es' if world_size != 1 else ''} in one launch, for the same bits")
    elif original.world_sizes:
        notes.append(f"note: the run went on with {describe(original.world_sizes, config.world_size)}: "
                     "re-run the same way")
    scratch = Path(tempfile.mkdtemp(prefix="verify-"))
    try:
        command = [*config_to_flags(config), "--out", str(scratch / "run")]
        runs = ([(world_size, ["--stop-after-steps", str(steps)] if steps is not None else [])] if anywhere
                else launches(original.world_sizes, config.world_size, steps))
        for size, flags in runs:
            process = launch_training(*command, *flags, world_size=size, torchrun=config.parallel == "fsdp")
            _, stderr = process.communicate()
            if process.returncode != 0:
                last = (stderr.strip().splitlines() or ["(no output)"])[-1]
                return 2, [*notes, f"cannot verify: the re-run failed: {last}"]
            command = ["--out", str(scratch / "run"), "--resume"]
        rerun = read_run(scratch / "run")
        return report(original, config.to_dict(), rerun, steps, notes, any_world_size=anywhere)
    finally:
        if keep:
            print(f"re-run kept in {scratch / 'run'}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def init_from_problem(config) -> str | None:
    """Why the re-run cannot start from the weights the run started from (--init-from's file gone,
    or holding other weights since: a re-run from them would prove nothing), or None."""
    from .engine.checkpoint import read_model_weights  # torch, which a bad RUN_DIR never needs
    from .utils.repro import state_dict_sha256

    if config.init_from == "none":
        return None
    if not Path(config.init_from).is_file():
        return f"--init-from {config.init_from}, the weights the run started from, is gone: put the file back"
    try:
        weights, _ = read_model_weights(Path(config.init_from))
    except ValueError as error:
        return f"--init-from {config.init_from}: {error}"
    now = state_dict_sha256(weights)
    if now != config.init_from_sha256:
        return (f"--init-from {config.init_from} holds other weights than the run started from (weights_sha256 "
                f"{now[:12]}..., recorded {config.init_from_sha256[:12]}...): put the file back")
    return None


def launches(history: list[dict], world_size: int, steps: int | None) -> list[tuple[int, list[str]]]:
    """The launches that re-run a run: (world size, flags added to the run's own flags for the
    first launch, to --out --resume for the others) for each. One launch, unless the world size
    changed: then the run is stopped at each change (after the epoch's evaluation if the original
    resumed after it: a second launch at the same world size resumes before the evaluation and
    stops after it), and resumed with the next world size."""
    result, size = [], world_size
    for change in history[1:]:
        if steps is not None and steps <= change["step"]:
            break
        result.append((size, ["--stop-after-steps", str(change["step"])]))
        if change["epoch_step"] == 0:  # resumed after the epoch's evaluation: the evaluation ran with `size`
            result.append((size, ["--stop-after-steps", str(change["step"])]))
        size = change["world_size"]
    result.append((size, ["--stop-after-steps", str(steps)] if steps is not None else []))
    return result


def report(original: Run, config: dict, rerun: Run, steps: int | None, lines: list[str],
           any_world_size: bool = False) -> tuple[int, list[str]]:
    """`config`: the original's settings, with the defaults of those it did not record.
    `any_world_size`: the re-run's world size may differ (--invariant-shards)."""
    lines = list(lines)
    ignored = ("world_size",) if any_world_size else ()
    environment = [line for line in environment_differences(original.environment, rerun.environment)
                   if line.partition(":")[0] not in ignored]
    if environment:
        lines.append("environment differs, so PyTorch does not promise bitwise equality:")
        lines += [f"  {line}" for line in environment]
    else:
        lines.append("environment: the same (python, torch, numpy, CUDA, cuDNN, device, threads, hash seed, flags)")
    changed = [line for line in differences(config, rerun.config) if line.partition(":")[0] not in ignored]
    if changed:
        lines.append("config differs (the code's fixed settings changed since the run):")
        lines += [f"  {line}" for line in changed]

    divergence = first_divergence(original, rerun, rows=len(rerun.metrics) if steps is not None else None)
    if divergence is None and steps is None and original.world_sizes != rerun.world_sizes and not any_world_size:
        divergence = f"the world sizes: {original.world_sizes} vs {rerun.world_sizes}"
    if divergence is None and steps is None and original.weights != rerun.weights:
        divergence = f"final weights: {original.weights} vs {rerun.weights}"
    if divergence is not None:
        return 1, [*lines, f"DIVERGED at {divergence} (recorded vs re-run)"]
    if steps is not None:
        return 0, [*lines, f"REPRODUCED the first {steps} steps, bit for bit"]
    return 0, [*lines, f"REPRODUCED weights_sha256 {rerun.weights}"]


if __name__ == "__main__":
    sys.exit(run_command("verify", main))
