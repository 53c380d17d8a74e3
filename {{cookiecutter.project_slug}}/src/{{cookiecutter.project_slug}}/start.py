"""Starting or resuming a run: every check of the command line, before anything changes.

A mistake gets one line and exit 2, and an earlier run in --out is never touched. Under
torchrun every rank makes the same checks; only rank 0 writes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from . import DEFAULT_SEED
from .checkpoint import load_latest_checkpoint
from .config import PROG, Config, parse_command_line, resume_config
from .runs import (
    MetricsLog,
    RunError,
    clear_run_files,
    describe_environment,
    environment_changes,
    make_out_dir,
    out_dir_refusal,
    read_json,
    write_json,
)
from .tracking import tracking_problem
from .utils import distributed
from .utils.device import select_device
from .utils.precision import compile_problem, precision_problem


@dataclass
class Plan:
    """What to run, decided from the command line."""

    config: Config
    out: Path
    device: torch.device
    checkpoint: dict | None  # the checkpoint to resume from; None for a new run
    stop_after_steps: int | None
    checkpoint_path: Path | None = None
    last_checkpoint: Path | None = None  # the newest checkpoint this process wrote


def plan_run(argv: list[str] | None) -> Plan | None:
    """The plan for this command line; None when it asks to resume a finished run."""
    typed, args = parse_command_line(argv)
    _, local_rank, world_size = distributed.context()
    out = args.out if args.out is not None else Path("runs") / f"seed{typed.get('seed', DEFAULT_SEED)}"
    checkpoint = path = None
    if args.resume:
        if args.overwrite:
            refuse("--resume and --overwrite contradict each other: choose one")
        config = resume_config_or_refuse(out, typed, world_size)
        if (out / "summary.json").exists():
            print(f"the run in {out} is complete (summary.json exists): nothing to resume")
            return None
        newest = load_latest_checkpoint(out / "checkpoints")
        if newest is None:
            refuse(f"--resume: no intact checkpoint in {out / 'checkpoints'}; start again with --overwrite")
        checkpoint, path = newest
        if config.precision == "fp16" and not checkpoint.get("scaler"):
            refuse(f"--resume: {path} has no GradScaler state, which an fp16 run needs to continue exactly "
                   "(a fresh scaler would start from another loss scale); start again with --overwrite")
    else:
        config = Config(**typed, world_size=world_size)
        refuse_if(out_dir_refusal(out, args.overwrite))
    refuse_if(config.problem() or tracking_problem(config))
    try:
        device = select_device(config.device)  # only asks what exists; CUDA stays uninitialised
        if world_size > 1 and device.type == "cuda":  # one GPU per process: the one torchrun assigned
            device = select_device(f"cuda:{local_rank}")
    except ValueError as error:
        refuse(str(error))
    return Plan(config, out, device, checkpoint, args.stop_after_steps, path)


def device_and_folder_problem(plan: Plan) -> str | None:
    """The checks that need the device (run after configure_determinism: they may start CUDA),
    then that a new run's folder can be made and written."""
    config = plan.config
    problem = precision_problem(config.precision, plan.device)
    problem = problem or (compile_problem(plan.device) if config.compile else None)
    if problem is None and plan.checkpoint is None and distributed.context()[0] == 0:
        problem = make_out_dir(plan.out)
    return problem


def resume_config_or_refuse(out: Path, typed: dict, world_size: int) -> Config:
    """The recorded config with the typed execution-only changes; refuses contradicting settings,
    on a finished run too."""
    try:
        recorded = Config.from_dict(read_json(out / "config.json", required=True))
    except RunError as error:
        refuse(f"--resume: {error}")
    except (TypeError, ValueError) as error:
        refuse(f"--resume: {out / 'config.json'}: {error}")
    config, differing = resume_config(recorded, typed, world_size)
    if differing:
        refuse(f"--resume: the run in {out} was made with other settings: {'; '.join(differing)}")
    return config


def refuse(message: str) -> None:
    """One line on stderr and exit 2, like argparse's own errors."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def refuse_if(message: str | None) -> None:
    if message:
        refuse(message)


def start_run_folder(plan: Plan, log: MetricsLog, is_main: bool) -> None:
    """A new run writes its config, environment and an empty metrics.csv; a resumed one cuts
    metrics.csv back to what its checkpoint counted, and warns if the environment changed."""
    if not is_main:
        return
    environment = describe_environment(plan.device, plan.config.world_size,
                                       distributed.backend())
    if plan.checkpoint is None:
        clear_run_files(plan.out)  # --overwrite: the earlier run's files, and only those
        write_json(plan.out / "config.json", plan.config.to_dict())
        write_json(plan.out / "environment.json", environment)
        log.start()
        return
    log.cut_back()
    print(f"resuming from {plan.checkpoint_path} (epoch {plan.checkpoint['epoch'] + 1}, "
          f"step {plan.checkpoint['step']})", flush=True)
    changed = environment_changes(plan.out, environment)
    if changed:
        print(f"warning: resuming in another environment ({'; '.join(changed)}): the result may differ from a "
              "run that never stopped", file=sys.stderr)
