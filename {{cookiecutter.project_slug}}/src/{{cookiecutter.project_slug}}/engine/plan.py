"""What a train command will do, decided from its command line before anything changes.

Every check of the input happens here: a mistake gets one line and exit 2, and an earlier run in
--out is never touched. Under torchrun every rank makes the same checks; only rank 0 writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

import torch

from .. import DEFAULT_SEED
from ..config import Config, parse_command_line, resume_config
from ..utils.device import select_device
from ..utils.repro import state_dict_sha256
from . import distributed
from .checkpoint import (
    checkpoint_paths,
    intact_checkpoints,
    load_latest_checkpoint,
    read_checkpoint,
    read_model_weights,
    read_sharded_checkpoint,
)
from .cli import PACKAGE, configure_logging, logger, prog
from .cli import refuse as refuse_with
from .precision import compile_problem, precision_problem
from .run_folder import (
    ERROR_LOG,
    lock_folder,
    make_out_dir,
    name_problem,
    out_dir_refusal,
    remove_if_made_empty,
    unlock_folder,
)
from .runs import RunError, read_json
from .startup import PORTABLE_CPU_KERNELS, missing_from_environment, portable_problem
from .tracking import tracking_problem
from .world_sizes import FILE as WORLD_SIZES
from .world_sizes import history_on_resume


@dataclass(frozen=True)
class Plan:
    """What to run, decided from the command line."""

    config: Config
    out: Path
    device: torch.device
    resume_from: dict | None  # the checkpoint to continue from; None for a new run
    resume_path: Path | None  # its file
    stop_after_steps: int | None
    settings_added: tuple[str, ...] = ()  # settings the resumed run's config.json lacked (recorded before they existed)
    started_with: int = 1  # the world size the run started with (config.json's), whatever it is now
    world_sizes: tuple[dict, ...] = ()  # its history once resumed (world_sizes.py); () if it never changed
    older_checkpoints: tuple[Path, ...] = ()  # the ones before resume_from, newest first, not yet read


def plan_run(argv: list[str] | None) -> Plan | None:
    """The plan for this command line; None when it asks to resume a finished run."""
    typed, args = parse_command_line(argv)
    _, local_rank, world_size = distributed.context()
    out = args.out if args.out is not None else Path("runs") / f"seed{typed.get('seed', DEFAULT_SEED)}"
    checkpoint = path = None
    added: list[str] = []
    started_with, history = world_size, []
    refuse_if(name_problem(out))  # before anything asks the file system about it
    if distributed.context()[0] == 0 and out.is_dir():  # first: a live run's folder is its own, say so before all
        refuse_if(lock_folder(out))
    if args.resume:
        if args.overwrite:
            refuse("--resume and --overwrite contradict each other: choose one")
        config, added, started_with = resume_config_or_refuse(out, typed, world_size)
        configure_logging(config.log_level)
        if (out / "summary.json").exists():
            logger.info(f"the run in {out} is complete (summary.json exists): nothing to resume")
            unlock_folder(out)
            return None
        refuse_if(parallel_problem(config))
        checkpoint, path, older = intact_or_refuse(out, config)
        history = resumed_history(out, started_with, checkpoint, world_size)
    else:
        config = Config(**typed, world_size=world_size)
        configure_logging(config.log_level)
        refuse_if(out_dir_refusal(out, args.overwrite))
        config = replace(config, init_from_sha256=init_weights_sha256(config.init_from))  # that file's, now
    refuse_if(parallel_problem(config) or config.problem() or tracking_problem(config)
              or cpu_kernels_problem(config.cpu_kernels))
    if config.threads > available_cpus():
        say(f"warning: --threads {config.threads} is more than the {available_cpus()} CPU(s) this process may use: "
            "the threads take turns on them, which gives the same bits, only slower")
    try:
        device = select_device(config.device)  # only asks what exists; CUDA stays uninitialised
        if world_size > 1 and device.type == "cuda":  # one GPU per process: the one torchrun assigned
            device = select_device(f"cuda:{local_rank}")
    except ValueError as error:
        refuse(str(error))
    return Plan(config, out, device, checkpoint, path, args.stop_after_steps, tuple(added), started_with,
                tuple(history), tuple(older) if args.resume else ())


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system has one, else all)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def length_problem(config: Config, train_samples: int, steps: int) -> str | None:
    """A run too short for its settings, known once the data is there: one sentence, or None."""
    limited = f" (--max-samples {config.max_samples})" if config.max_samples else ""
    if train_samples < config.batch_size:
        return (f"--batch-size {config.batch_size} is more than the {train_samples} training samples{limited}: "
                "a step would need samples the data does not have; lower --batch-size")
    if config.warmup_steps > steps:
        return (f"--warmup-steps {config.warmup_steps} is longer than the run's {steps} optimizer steps: the "
                "learning rate would never reach --lr; lower --warmup-steps, or train for longer")
    return None


def init_weights_sha256(init_from: str) -> str:
    """--init-from's weights_sha256 ("" for none); one line and exit 2 for a file that holds no weights."""
    if init_from == "none":
        return ""
    try:
        weights, _ = read_model_weights(Path(init_from))
    except ValueError as error:
        refuse(f"--init-from: {error}")
    return state_dict_sha256(weights)


def init_weights_problem(model: torch.nn.Module, config: Config) -> str | None:
    """Loads --init-from's weights into `model`, built by task.py; why they do not fit, or None.
    A file that changed since the run started (its recorded sha256) is refused too."""
    weights, _ = read_model_weights(Path(config.init_from))
    if state_dict_sha256(weights) != config.init_from_sha256:
        return f"--init-from {config.init_from} changed while the run started: its weights are not those recorded"
    return fit_problem(model, weights, f"--init-from {config.init_from}")


def fit_problem(model: torch.nn.Module, weights: dict, what: str) -> str | None:
    """Loads `weights` (a state_dict, named `what` for the user) into `model`; why they do not fit
    it, in one sentence (the first line of torch's own message), or None."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        first_line = str(error).strip().splitlines()[0].rstrip(":")
        return f"{what} does not fit the model task.py makes ({first_line})"
    return None


def keep_best_problem(keep_best: str, names: tuple[str, ...]) -> str | None:
    """Why --keep-best cannot watch the figure it names (one the task does not compute), or None."""
    name = keep_best.partition(":")[2]
    if keep_best == "off" or name in names:
        return None
    return f"--keep-best {keep_best}: the task has no figure {name!r}; its figures are {', '.join(names)}"


def parallel_problem(config: Config) -> str | None:
    if config.parallel == "fsdp" and not distributed.under_torchrun():
        return ("--parallel fsdp shards the model over processes that torchrun starts: torchrun --standalone "
                f"--nproc-per-node N -m {PACKAGE}.train ... (N may be 1)")
    return None


def intact_or_refuse(out: Path, config: Config) -> tuple[dict, Path, list[Path]]:
    """The newest intact checkpoint of the run in `out`, in the format its --parallel writes, its
    file, and the older checkpoints' files (read only if that one does not fit the model); one
    line and exit 2 when none is intact, telling a run whose checkpoints are all damaged from one
    that wrote none yet."""
    sharded = config.parallel == "fsdp"
    intact = intact_checkpoints(out / "checkpoints", sharded, first_only=True)
    if not intact:
        other = load_latest_checkpoint(out / "checkpoints", sharded=not sharded)
        if other is not None:  # a folder edited by hand: config.json and the checkpoints disagree
            refuse(f"--resume: {other[1]} was written by another --parallel than config.json's "
                   f"{config.parallel!r}, and cannot be resumed as that")
        written = checkpoint_paths(out / "checkpoints", sharded)
        if written:
            refuse(f"--resume: all {len(written)} checkpoints in {out / 'checkpoints'} are damaged (the warnings "
                   "above say how); nothing intact to resume from: start it again with --overwrite")
        refuse(f"--resume: no checkpoint in {out / 'checkpoints'} yet (the run stopped before its first one); "
               "start it again with --overwrite")
    checkpoint, path = intact[0]
    if config.precision == "fp16" and not checkpoint.get("scaler"):
        refuse(f"--resume: {path} has no GradScaler state, which an fp16 run needs to continue exactly "
               "(a fresh scaler would start from another loss scale); start again with --overwrite")
    paths = checkpoint_paths(out / "checkpoints", sharded)
    return checkpoint, path, paths[paths.index(path) + 1:]


def load_one_that_fits(plan: Plan, state) -> Plan:
    """Loads into `state` (a TrainingState) the newest intact checkpoint that fits its model and
    optimizer, and returns the plan with it. One that loads as a file but does not fit them
    (another shape, a part missing) counts as damaged, as a torn one does: a warning says why, and
    the one before it is tried. One line and exit 2 if none fits."""
    sharded = plan.config.parallel == "fsdp"
    candidates = [(plan.resume_from, plan.resume_path), *((None, path) for path in plan.older_checkpoints)]
    for checkpoint, path in candidates:
        if checkpoint is None:
            checkpoint, problem = read_sharded_checkpoint(path) if sharded else read_checkpoint(path)
            if problem is not None:
                say(f"warning: skipping damaged checkpoint {path} ({problem})")
                continue
        try:
            state.load_checkpoint(checkpoint, path)
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            say(f"warning: skipping checkpoint {path}: it does not fit the model and optimizer ({reason})")
            continue
        if path == plan.resume_path:
            return plan
        history = resumed_history(plan.out, plan.started_with, checkpoint, plan.config.world_size)
        return replace(plan, resume_from=checkpoint, resume_path=path, world_sizes=tuple(history))
    refuse(f"--resume: no checkpoint in {plan.out / 'checkpoints'} fits the model and optimizer (the warnings above "
           "say why): the task changed since they were written? Start it again with --overwrite")


def resumed_history(out: Path, started_with: int, checkpoint: dict, world_size: int) -> list[dict]:
    """world_sizes.json as it will be once resumed (see world_sizes.py)."""
    try:
        recorded = (read_json(out / WORLD_SIZES, required=False) or {}).get("world_sizes", [])
    except RunError as error:
        refuse(f"--resume: {error}")
    return history_on_resume(recorded, started_with, checkpoint, world_size)


def cpu_kernels_problem(mode: str) -> str | None:
    """Why this process cannot train with `--cpu-kernels mode`, or None. The libraries read the pins
    once, as torch loads: a process that did not start with them (train called from your own script,
    say) would record "portable" and compute natively."""
    if mode != "portable":
        return None
    problem, missing = portable_problem(), missing_from_environment(PORTABLE_CPU_KERNELS)
    if problem is None and missing:
        pins = " ".join(f"{name}={value}" for name, value in missing.items())
        problem = (f"--cpu-kernels portable: this process did not start with {pins}; start training as "
                   f"`{prog('train')}`, which sets them, or set them before Python starts")
    return problem


def device_and_folder_problem(plan: Plan) -> str | None:
    """The checks that need the device (run after configure_determinism: they may start CUDA),
    then that a new run's folder can be made and written, and that no other process writes to the
    run's folder (rank 0 holds its lock for the run's whole life)."""
    config = plan.config
    problem = precision_problem(config.precision, plan.device)
    problem = problem or (compile_problem(plan.device) if config.compile else None)
    if problem is None and plan.resume_from is None and distributed.context()[0] == 0:
        problem = make_out_dir(plan.out)
    if problem is None and distributed.context()[0] == 0:
        problem = lock_folder(plan.out)
    return problem


def resume_config_or_refuse(out: Path, typed: dict, world_size: int) -> tuple[Config, list[str], int]:
    """The recorded config with the typed execution-only changes and this world size, the
    settings it lacked, and the world size it recorded; refuses contradicting settings, on a
    finished run too."""
    if not out.exists():
        refuse(f"--resume: --out {out} does not exist, so there is no run to resume")
    if not out.is_dir():
        refuse(f"--resume: --out {out} is a file, not a run folder")
    if (out / ERROR_LOG).exists() and not (out / "config.json").exists():  # what a failure before step 1 leaves
        refuse(f"--resume: the run in {out} failed before its first step ({out / ERROR_LOG}), so there is nothing "
               "to resume; once fixed, run the same command without --resume")
    try:
        recorded, added = Config.from_dict(read_json(out / "config.json", required=True))
    except RunError as error:
        refuse(f"--resume: {error}")
    except (TypeError, ValueError) as error:
        refuse(f"--resume: {out / 'config.json'}: {error}")
    config, differing = resume_config(recorded, typed, world_size)
    if differing:
        refuse(f"--resume: the run in {out} was made with other settings: {'; '.join(differing)}")
    return config, added, recorded.world_size


def refuse(message: str) -> NoReturn:
    """One line on stderr and exit 2, like argparse's own errors; the run folder is left to others,
    and one this command made and wrote nothing into is removed."""
    unlock_folder()
    remove_if_made_empty()
    refuse_with("train", message)


def refuse_if(message: str | None) -> None:
    if message:
        refuse(message)


def say(message: str) -> None:
    """A warning or note (on stderr; from rank 0 only: engine/cli.py's logging)."""
    logger.warning(message)
