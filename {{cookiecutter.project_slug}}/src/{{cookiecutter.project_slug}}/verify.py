"""Re-runs a recorded run in a fresh process and says whether it reproduced, step by step.

    python -m {{ cookiecutter.project_slug }}.verify runs/a              # the whole run
    python -m {{ cookiecutter.project_slug }}.verify runs/a --steps 20   # only its first 20 steps

The re-run goes into a scratch folder (RUN_DIR is never touched) with the flags recorded in
RUN_DIR/config.json; a run made by torchrun on one machine is re-run under torchrun, with its
world size. Prints REPRODUCED and the weight hash, exit 0; or the first step where the
two runs part (metric and both values), exit 1. The environments are compared first: bitwise
equality is promised only on the same machine and software stack. A bad RUN_DIR: one line, exit 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from .runs import ENVIRONMENT_KEYS, Run, RunError, differences, first_divergence, read_run, start_training

PACKAGE = "{{ cookiecutter.project_slug }}"
PROG = f"python -m {PACKAGE}.verify"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Re-run a recorded run and compare step by step.",
                                     allow_abbrev=False)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--steps", type=int, default=None, help="verify only the first N optimizer steps")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder of the re-run")
    parser.error = lambda message: parser.exit(2, f"{PROG}: error: {message}\n")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be at least 1, not {args.steps}")
    try:
        original = read_run(args.run_dir)
    except RunError as error:
        parser.error(str(error))
    if args.steps is None and original.summary is None:
        parser.error(f"{args.run_dir} did not finish (no summary.json); verify its first steps with --steps N")
    recorded_steps = len(original.train_losses)
    if args.steps is not None and args.steps > recorded_steps:  # never claim steps that do not exist
        parser.error(f"--steps {args.steps}: the run in {args.run_dir} has only {recorded_steps} steps")

    what = (f"the first {args.steps} of its {recorded_steps} steps" if args.steps
            else f"all {recorded_steps} steps")
    print(f"re-running {what} of {args.run_dir} in a fresh process...", flush=True)
    code, lines = verify(original, args.steps, keep=args.keep)
    print("\n".join(lines))
    return code


def verify(original: Run, steps: int | None = None, keep: bool = False) -> tuple[int, list[str]]:
    """Re-runs `original` in a fresh process in a scratch folder and compares: (exit code, report)."""
    from .config import Config, config_to_flags  # imported here: torch, which a bad RUN_DIR never needs

    scratch = Path(tempfile.mkdtemp(prefix="verify-"))
    try:
        flags = [*config_to_flags(Config.from_dict(original.config)), "--out", str(scratch / "run")]
        if steps is not None:
            flags += ["--stop-after-steps", str(steps)]
        process = start_training(*flags, world_size=int(original.config.get("world_size", 1)))
        _, stderr = process.communicate()
        if process.returncode != 0:
            last = (stderr.strip().splitlines() or ["(no output)"])[-1]
            return 1, [f"NOT REPRODUCED: the re-run failed: {last}"]
        return report(original, read_run(scratch / "run"), steps)
    finally:
        if keep:
            print(f"re-run kept in {scratch / 'run'}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def report(original: Run, rerun: Run, steps: int | None) -> tuple[int, list[str]]:
    lines = []
    environment = differences(original.environment, rerun.environment, ENVIRONMENT_KEYS)
    if environment:
        lines.append("environment differs, so PyTorch does not promise bitwise equality:")
        lines += [f"  {line}" for line in environment]
    else:
        lines.append("environment: the same (python, torch, numpy, CUDA, cuDNN, device, threads, hash seed, flags)")
    config = differences(original.config, rerun.config)
    if config:
        lines.append("config differs (the code's fixed settings changed since the run):")
        lines += [f"  {line}" for line in config]

    expected = original.metrics[: len(rerun.metrics)] if steps is not None else original.metrics
    divergence = first_divergence(expected, rerun.metrics)
    if divergence is None and steps is None and original.weights != rerun.weights:
        divergence = f"final weights: {original.weights} vs {rerun.weights}"
    if divergence is not None:
        return 1, [*lines, f"DIVERGED at {divergence} (recorded vs re-run)"]
    if steps is not None:
        return 0, [*lines, f"REPRODUCED the first {steps} steps, bit for bit"]
    return 0, [*lines, f"REPRODUCED weights_sha256 {rerun.weights}"]


if __name__ == "__main__":
    sys.exit(main())
