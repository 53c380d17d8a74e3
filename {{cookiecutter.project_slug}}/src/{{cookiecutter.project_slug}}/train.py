"""Trains and evaluates the example model. Every run writes a folder that records what it did.

    python -m {{ cookiecutter.project_slug }}.train --seed 42 --out runs/a
    python -m {{ cookiecutter.project_slug }}.train --seed 42 --out runs/b   # same weights_sha256
    python -m {{ cookiecutter.project_slug }}.train --out runs/a --resume    # after a crash or preemption

The run folder holds:
    config.json       every setting of the run (the single source of truth for its result)
    environment.json  versions, devices, determinism flags and environment variables in effect
    metrics.csv       one row per optimizer step (split=train) and per evaluation (split=val)
    checkpoints/      the last few checkpoints, for --resume
    model.pt          the final state_dict (load it with torch.load(..., weights_only=True))
    summary.json      seed, weights_sha256, train_seconds and the final evaluation metrics
"""

from __future__ import annotations

import os
import sys

from .utils.hashseed import hash_seed_in_effect, relaunch_with_hash_seed

DEFAULT_SEED = {{ cookiecutter.seed }}

if __name__ == "__main__":
    # PYTHONHASHSEED is read once, when the interpreter starts, so the training process relaunches
    # itself with the value derived from --seed. Doing it here, before torch is imported, makes
    # it cheap. A set of strings then iterates in one order, whatever the launching shell had set.
    relaunch_with_hash_seed(sys.argv[1:], DEFAULT_SEED)
    # Ctrl-C while still starting up: nothing to save yet, so leave quietly (no traceback).
    import signal

    signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(128 + signum))

import argparse  # the imports below come after the relaunch above, on purpose (ruff: E402 off here)
import csv
import json
import math
import platform
import shutil
import signal
import subprocess
import time
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from tqdm import tqdm

from .checkpoint import atomic_write, atomic_write_text, checkpoint_path, load_latest_checkpoint, save_checkpoint
from .data import NUM_CLASSES, ImageDataset, load_arrays, make_loader, split
from .model import Net
from .runs import ENVIRONMENT_KEYS, METRIC_FIELDS, RunError, differences, read_json
from .utils.device import available_devices, select_device, to_device
from .utils.repro import (
    DETERMINISM_MODES,
    MAX_SEED,
    capture_rng_state,
    configure_determinism,
    determinism_flags,
    explain_nondeterministic_error,
    restore_rng_state,
    seed_everything,
    state_dict_sha256,
)

PROG = "python -m {{ cookiecutter.project_slug }}.train"
DATASET = {{ cookiecutter.dataset|tojson }}
RUN_FILES = ("config.json", "environment.json", "metrics.csv", "model.pt", "summary.json", "checkpoints")
# Settings that change how a run executes but not what it computes (the tests prove it for the
# worker settings): a resumed run may change them. Every other setting must match to resume.
EXECUTION_ONLY = ("num_workers", "persistent_workers", "prefetch_factor", "checkpoint_every")
# Environment variables that change results or say how they were obtained; recorded per run.
RECORDED_ENV = (
    "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_LAUNCH_BLOCKING",
)


# ---------------------------------------------------------------------------------------------
# Command line and config
# ---------------------------------------------------------------------------------------------

def _int_in(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f"in {low} .. {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{value} is not {bound}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Train the example model reproducibly.",
                                     allow_abbrev=False)  # --epoch must not quietly mean --epochs
    parser.add_argument("--seed", type=_int_in(0, MAX_SEED), default=DEFAULT_SEED,
                        help="seeds every generator, and PYTHONHASHSEED (default: %(default)s)")
    parser.add_argument("--epochs", type=_int_in(1), default=5)
    parser.add_argument("--batch-size", type=_int_in(1), default=64)
    parser.add_argument("--lr", type=_positive_float, default=0.05, help="peak learning rate")
    parser.add_argument("--num-workers", type=_int_in(0), default=0,
                        help="DataLoader worker processes; the result does not depend on it")
    parser.add_argument("--persistent-workers", action="store_true",
                        help="keep workers alive between epochs; the result does not depend on it")
    parser.add_argument("--prefetch-factor", type=_int_in(1), default=None,
                        help="batches each worker loads ahead; the result does not depend on it")
    parser.add_argument("--threads", type=_int_in(1), default=1,
                        help="CPU threads for torch's intra-op parallelism; part of the config "
                             "because results can depend on it (default: %(default)s, not the "
                             "machine's core count)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--deterministic", choices=DETERMINISM_MODES,
                        default={{ cookiecutter.determinism|tojson }},
                        help="strict: error on a non-deterministic op; warn: warn; off: fastest")
    parser.add_argument("--eval-every", type=_int_in(0), default=1,
                        help="evaluate every K epochs (0: only at the end); trained weights do not depend on it")
    parser.add_argument("--checkpoint-every", type=_int_in(0), default=50,
                        help="save a checkpoint every N optimizer steps (0: only at epoch ends)")
    parser.add_argument("--stop-after-steps", type=_int_in(1), default=None,
                        help="stop after this many optimizer steps, with a checkpoint, as if interrupted "
                             "(verify and doctor use it to check the first steps of a long run)")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: runs/seed<SEED>)")
    parser.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its newest intact checkpoint")
    # One clear line and exit 2 for a user's mistake, instead of the usage block.
    parser.error = lambda message: parser.exit(2, f"{PROG}: error: {message}\n")
    return parser


def explicit_flags(argv: list[str] | None) -> set[str]:
    """The settings the user typed, as opposed to defaults. argparse fills in a default only where
    the namespace has no value yet, so a namespace pre-filled with a marker shows what was typed."""
    parser = build_parser()
    untyped = object()
    names = vars(parser.parse_args([]))
    namespace = parser.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(names, untyped)))
    return {name for name, value in vars(namespace).items() if value is not untyped}


def make_config(args: argparse.Namespace, world_size: int = 1) -> dict:
    """Every setting of the run. Equal result-affecting settings (all but EXECUTION_ONLY), on an
    equal environment, give equal weights; where a run writes its files is not part of that.
    The world size comes from torchrun: another world size is another run (other batches)."""
    return {
        "seed": args.seed,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "threads": args.threads,
        "device": args.device,
        "deterministic": args.deterministic,
        "eval_every": args.eval_every,
        "dataset": DATASET,
        "width": 16,
        "dropout": 0.25,
        "world_size": world_size,
        "num_workers": args.num_workers,
        "persistent_workers": args.persistent_workers,
        "prefetch_factor": args.prefetch_factor,
        "checkpoint_every": args.checkpoint_every,
    }


def config_to_flags(config: dict) -> list[str]:
    """The command-line flags that reproduce `config` (settings fixed by the code have no flag, and
    the world size is torchrun's to set)."""
    flags = []
    for name, default in vars(build_parser().parse_args([])).items():
        if name not in config:  # --out, --resume and the like are not settings of the run
            continue
        value = config[name]
        if isinstance(default, bool):
            flags += [f"--{name.replace('_', '-')}"] if value else []
        elif value is not None:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


def resume_config(recorded: dict, requested: dict, explicit: set[str]) -> tuple[dict, list[str]]:
    """The config to resume with, and the result-affecting keys where the request contradicts the
    recorded run. Flags the user did not type take the recorded values."""
    flags = set(vars(build_parser().parse_args([])))
    config = dict(recorded)
    differing = []
    for key, value in requested.items():
        if key in flags and key not in explicit:  # neither typed nor fixed by the code
            continue
        if key in EXECUTION_ONLY:
            config[key] = value
        elif recorded.get(key) != value:
            differing.append(f"{key} (recorded {recorded.get(key)!r}, given {value!r})")
    return config, differing


# ---------------------------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------------------------

def train_one_step(model: nn.Module, batch, optimizer, scheduler, device) -> tuple[float, float]:
    images, labels = to_device(batch, device)
    logits = model(images)
    # F.cross_entropy, like nn.CrossEntropyLoss(), holds no parameters: nothing to move to the device.
    loss = F.cross_entropy(logits, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    accuracy = (logits.argmax(dim=1) == labels).float().mean()
    return loss.item(), accuracy.item()


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> dict[str, float]:
    """Mean loss and accuracy over `loader`.

    Runs in eval mode (dropout off, BatchNorm uses its running statistics and does not update
    them) without gradients, draws no random number, and restores the mode it found.
    """
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    try:
        with torch.no_grad():
            for batch in loader:
                images, labels = to_device(batch, device)
                logits = model(images)
                loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
                correct += int((logits.argmax(dim=1) == labels).sum())
                count += len(labels)
    finally:
        model.train(was_training)
    if dist.is_initialized():  # under torchrun each rank saw its own share: add them up
        totals = torch.tensor([loss_sum, correct, count], dtype=torch.float64, device=device)
        dist.all_reduce(totals)
        loss_sum, correct, count = totals.tolist()
    return {"loss": loss_sum / count, "accuracy": correct / count}


# ---------------------------------------------------------------------------------------------
# The run folder
# ---------------------------------------------------------------------------------------------

def out_dir_refusal(out: Path, overwrite: bool) -> str | None:
    """Why a new run may not go into `out`, or None. Looks only; never touches a run."""
    existing_parent = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not existing_parent.is_dir():
        return f"--out {out}: {existing_parent} exists and is not a folder"
    if not os.access(existing_parent, os.W_OK | os.X_OK):
        return f"--out {out}: cannot write in {existing_parent}"
    existing = [name for name in RUN_FILES if (out / name).exists()]
    if existing and not overwrite:
        return (f"--out {out} already holds a run ({', '.join(existing)}); "
                "pass --resume to continue it, --overwrite to replace it, or choose another --out")
    return None


def clear_out_dir(out: Path) -> None:
    """Removes the files of an earlier run (and only those: other files in `out` stay)."""
    for name in RUN_FILES:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
        elif (out / name).exists():
            (out / name).unlink()
    out.mkdir(parents=True, exist_ok=True)


def write_json(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def keep_metrics_rows(path: Path, rows: int) -> None:
    """Cuts metrics.csv back to its header and first `rows` rows: those the checkpoint had seen.
    Rows written after it, possibly torn by a kill, are written again by the resumed run."""
    with open(path, newline="", encoding="utf-8") as file:
        kept = file.read().splitlines(keepends=True)[: 1 + rows]
    atomic_write_text(path, "".join(kept))


def git_commit() -> str | None:
    """The commit of the project's checkout, with '+dirty' for uncommitted changes; None outside git."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def describe_environment(device: torch.device) -> dict:
    cuda = torch.cuda.is_available()
    return {
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        "distributed_backend": dist.get_backend() if dist.is_initialized() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else platform.processor() or platform.machine()),
        "available_devices": available_devices(),
        "intra_op_threads": torch.get_num_threads(),
        "python_hash_seed": hash_seed_in_effect(),
        "determinism": determinism_flags(),
        "environment_variables": {name: os.environ.get(name) for name in RECORDED_ENV},
        "git_commit": git_commit(),
    }


def environment_changes(out: Path, device: torch.device) -> list[str]:
    """What differs, among the settings that bitwise equality depends on, between the environment
    recorded when the run started and this one."""
    try:
        recorded = read_json(out / "environment.json", required=False)
    except RunError as error:
        return [str(error)]
    if recorded is None:
        return ["environment.json is missing"]
    return differences(recorded, describe_environment(device), ENVIRONMENT_KEYS)


# ---------------------------------------------------------------------------------------------
# Stopping cleanly on SIGTERM (schedulers, preemption) and Ctrl-C
# ---------------------------------------------------------------------------------------------

def install_stop_handlers(stop: dict) -> dict:
    """The first SIGTERM or SIGINT asks the loop to stop after the current step; a second one exits
    at once. Returns the previous handlers, to restore."""

    def request_stop(signum: int, frame) -> None:
        if stop.get("signal") is not None:
            name = signal.Signals(signum).name
            print(f"{name} again: exiting now, without a checkpoint", file=sys.stderr, flush=True)
            # At once, skipping clean-up that could block (loader workers): every file on disk was
            # written atomically, so the newest checkpoint is intact.
            os._exit(128 + signum)
        stop["signal"] = signum

    return {signum: signal.signal(signum, request_stop) for signum in (signal.SIGTERM, signal.SIGINT)}


# ---------------------------------------------------------------------------------------------
# torchrun: several processes, one per device
# ---------------------------------------------------------------------------------------------

DISTRIBUTED_TIMEOUT = timedelta(minutes=5)  # a rank that stops answering fails the others, no hang


def distributed_context() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) as torchrun sets them; (0, 0, 1) for a plain `python -m`."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def all_agree(flag: bool, device: torch.device) -> bool:
    """True on every rank if it is true on any: ranks must stop at the same step, or the next
    gradient all-reduce waits for a rank that has left."""
    if not dist.is_initialized():
        return flag
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def mean_over_ranks(values: list[float], device: torch.device) -> list[float]:
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return (tensor / dist.get_world_size()).tolist()


def rng_states_of_all_ranks() -> list[dict]:
    """Every rank's RNG state, gathered on rank 0 (a list on rank 0, [] elsewhere)."""
    if not dist.is_initialized():
        return [capture_rng_state()]
    states = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(capture_rng_state(), states, dst=0)
    return states or []


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    rank, local_rank, world_size = distributed_context()
    out = args.out if args.out is not None else Path("runs") / f"seed{args.seed}"
    if args.num_workers == 0 and (args.persistent_workers or args.prefetch_factor is not None):
        parser.error("--persistent-workers and --prefetch-factor need --num-workers above 0")

    # Every check of the user's input comes first, before any global state changes: a mistake
    # gets one line and exit 2, and an earlier run in --out is never touched. Under torchrun every
    # rank makes the same checks; only rank 0 writes.
    resumed = None
    if args.resume:
        if args.overwrite:
            parser.error("--resume and --overwrite contradict each other: choose one")
        try:
            recorded = read_json(out / "config.json", required=True)
        except RunError as error:
            parser.error(f"--resume: {error}")
        if (out / "summary.json").exists():
            print(f"the run in {out} is complete (summary.json exists): nothing to resume")
            return 0
        config, differing = resume_config(recorded, make_config(args, world_size), explicit_flags(argv))
        if differing:
            parser.error(f"--resume: the run in {out} was made with other settings: {'; '.join(differing)}")
        resumed = load_latest_checkpoint(out / "checkpoints")
        if resumed is None:
            parser.error(f"--resume: no intact checkpoint in {out / 'checkpoints'}; start again with --overwrite")
    else:
        config = make_config(args, world_size)
        refusal = out_dir_refusal(out, args.overwrite)
        if refusal:
            parser.error(refusal)
    try:
        device = select_device(config["device"])  # only asks what exists; CUDA stays uninitialised
        if world_size > 1 and device.type == "cuda":  # one GPU per process: the one torchrun assigned
            device = select_device(f"cuda:{local_rank}")
    except ValueError as error:
        parser.error(str(error))

    # 1. Determinism before anything touches the GPU: CUDA reads CUBLAS_WORKSPACE_CONFIG once.
    configure_determinism(config["deterministic"])
    # 2. A fixed thread count: intra-op parallelism splits reductions by thread, so the default
    #    (one thread per core) would make results depend on the machine.
    torch.set_num_threads(config["threads"])
    if world_size > 1:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=DISTRIBUTED_TIMEOUT)
    try:
        if rank == 0 and resumed is None:
            clear_out_dir(out)
        return train(config, out, device, resumed, args.stop_after_steps)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def train(config: dict, out: Path, device: torch.device, resumed: tuple[dict, Path] | None,
          stop_after_steps: int | None) -> int:
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    is_main = rank == 0
    # 3. Seeds last, right before the first draw: model initialisation. Every rank starts from
    #    the same weights (DistributedDataParallel also copies rank 0's to the others).
    seed_everything(config["seed"])

    train_arrays, val_arrays = split(*load_arrays(config["dataset"], config["seed"]), config["seed"])
    train_set = ImageDataset(*train_arrays, seed=config["seed"], train=True)
    val_set = ImageDataset(*val_arrays, seed=config["seed"], train=False)
    loader_options = {"num_workers": config["num_workers"], "persistent_workers": config["persistent_workers"],
                      "prefetch_factor": config["prefetch_factor"], "rank": rank, "world_size": world_size}
    train_loader = make_loader(train_set, config["batch_size"], config["seed"], shuffle=True, **loader_options)
    val_loader = make_loader(val_set, 256, config["seed"], shuffle=False, **loader_options)

    net = Net(NUM_CLASSES, width=config["width"], dropout=config["dropout"]).to(device)
    # Under torchrun, DistributedDataParallel averages gradients across ranks after each backward.
    model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None) \
        if world_size > 1 else net
    optimizer = torch.optim.SGD(net.parameters(), lr=config["lr"], momentum=config["momentum"],
                                weight_decay=config["weight_decay"])
    steps_per_epoch = math.ceil(len(train_loader.sampler) / config["batch_size"])
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config["lr"],
                                                    total_steps=config["epochs"] * steps_per_epoch)

    # Where the loop starts: the beginning, or the checkpoint's exact position.
    start_epoch, start_batch, step, rows, seconds_before = 0, 0, 0, 0, 0.0
    generator_state = None
    if resumed is not None:
        state, path = resumed
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start_epoch, start_batch, step = state["epoch"], state["batch"], state["step"]
        rows, seconds_before = state["metrics_rows"], state["train_seconds"]
        generator_state = state["loader_generator"]
        if is_main:
            keep_metrics_rows(out / "metrics.csv", rows)
            print(f"resuming from {path} (epoch {start_epoch + 1}, step {step})", flush=True)
            changed = environment_changes(out, device)
            if changed:
                print(f"warning: resuming in another environment ({'; '.join(changed)}): the result may "
                      "differ from a run that never stopped", file=sys.stderr)
        restore_rng_state(state["rng"][rank])  # last: building the model above drew random numbers too
    elif is_main:
        write_json(out / "config.json", config)
        write_json(out / "environment.json", describe_environment(device))
        atomic_write_text(out / "metrics.csv", ",".join(METRIC_FIELDS) + "\n")

    def checkpoint(epoch: int, batch: int) -> Path:
        """Every rank takes part (their RNG states are gathered); rank 0 writes."""
        rng = rng_states_of_all_ranks()
        path = checkpoint_path(out / "checkpoints", step)
        if is_main:
            metrics_file.flush()
            os.fsync(metrics_file.fileno())  # the rows a checkpoint counts are on disk before it is
            path = save_checkpoint(out / "checkpoints", {
                "model": net.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": rng, "loader_generator": epoch_generator_state,
                "epoch": epoch, "batch": batch, "step": step, "metrics_rows": rows,
                "train_seconds": seconds_before + time.perf_counter() - start, "config": config,
            })
        return path

    def write_row(epoch: int, split_name: str, loss: float, accuracy: float) -> None:
        nonlocal rows
        if is_main:
            # repr() of a float round-trips exactly, so two runs compare bit for bit.
            metrics.writerow({"epoch": epoch, "step": step, "split": split_name, "loss": repr(loss),
                              "accuracy": repr(accuracy)})
        rows += 1

    stop: dict = {}
    previous_handlers = install_stop_handlers(stop)
    interactive = sys.stderr.isatty() and is_main
    start = time.perf_counter()
    result = None
    try:
        with open(out / "metrics.csv", "a", newline="", encoding="utf-8") if is_main else nullcontext() as metrics_file:
            metrics = csv.DictWriter(metrics_file, fieldnames=METRIC_FIELDS) if is_main else None
            model.train()
            for epoch in range(start_epoch, config["epochs"]):
                first_batch = start_batch if epoch == start_epoch else 0
                # The loader draws its workers' base seed from its own generator when an epoch's
                # iterator starts; a resumed epoch restores the state it had at that moment.
                if generator_state is not None and epoch == start_epoch:
                    train_loader.generator.set_state(generator_state)
                epoch_generator_state = train_loader.generator.get_state()
                train_loader.sampler.set_epoch(epoch, start=first_batch * config["batch_size"])
                batch_index = first_batch
                for batch in tqdm(train_loader, desc=f"epoch {epoch + 1}/{config['epochs']}",
                                  disable=not interactive, leave=False):
                    loss, accuracy = train_one_step(model, batch, optimizer, scheduler, device)
                    loss, accuracy = mean_over_ranks([loss, accuracy], device)
                    step += 1
                    batch_index += 1
                    write_row(epoch, "train", loss, accuracy)
                    end_of_epoch = batch_index == steps_per_epoch
                    every = config["checkpoint_every"]
                    signalled = all_agree(stop.get("signal") is not None, device)
                    planned_stop = step == stop_after_steps
                    if signalled or planned_stop or (every and step % every == 0 and not end_of_epoch):
                        path = checkpoint(epoch, batch_index)
                    again = (f"{PROG} --out {out} --resume" if world_size == 1
                             else "the same torchrun command plus --resume")
                    if planned_stop:
                        if is_main:
                            print(f"stopped after step {step} as asked, checkpoint {path}; continue with: {again}")
                        return 0
                    if signalled:
                        signum = stop.get("signal") or signal.SIGTERM  # a rank told by another
                        if is_main:
                            print(f"{signal.Signals(signum).name}: stopped after step {step}, checkpoint {path}; "
                                  f"continue with: {again}", file=sys.stderr)
                        return 128 + signum
                last_epoch = epoch == config["epochs"] - 1
                if last_epoch or (config["eval_every"] and (epoch + 1) % config["eval_every"] == 0):
                    result = evaluate(model, val_loader, device)
                    write_row(epoch, "val", result["loss"], result["accuracy"])
                    if is_main:
                        print(f"epoch {epoch + 1}/{config['epochs']}  step {step}  val_loss {result['loss']:.4f}  "
                              f"val_accuracy {result['accuracy']:.4f}", flush=True)
                epoch_generator_state = train_loader.generator.get_state()
                checkpoint(epoch + 1, 0)
    except RuntimeError as error:
        explanation = explain_nondeterministic_error(error)
        if explanation is None:
            raise
        print(f"{PROG}: error: {explanation}", file=sys.stderr)
        return 1
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
    train_seconds = seconds_before + time.perf_counter() - start

    if result is None:  # resumed from the checkpoint after the last epoch: its evaluation result
        result = evaluate(model, val_loader, device)  # was not saved; evaluating again changes nothing
    if not is_main:
        return 0
    weights = net.state_dict()
    atomic_write(out / "model.pt", lambda file: torch.save(weights, file))
    summary = {
        "seed": config["seed"],
        "weights_sha256": state_dict_sha256(weights),
        "train_seconds": train_seconds,
        "steps": step,
        "world_size": world_size,
        "val_loss": result["loss"],
        "val_accuracy": result["accuracy"],
    }
    write_json(out / "summary.json", summary)
    print(f"weights_sha256 {summary['weights_sha256']}  val_accuracy {result['accuracy']:.4f}  "
          f"train_seconds {train_seconds:.1f}  -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
