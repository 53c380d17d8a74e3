"""Trains and evaluates the example model. Every run writes a folder that records what it did.

    python -m {{ cookiecutter.project_slug }}.train --seed 42 --out runs/a
    python -m {{ cookiecutter.project_slug }}.train --seed 42 --out runs/b   # same weights_sha256

The run folder holds:
    config.json       every setting of the run (the single source of truth for its result)
    environment.json  versions, devices, determinism flags and environment variables in effect
    metrics.csv       one row per optimizer step (split=train) and per evaluation (split=val)
    model.pt          the final state_dict (load it with torch.load(..., weights_only=True))
    summary.json      seed, weights_sha256, train_seconds and the final evaluation metrics
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from .data import NUM_CLASSES, ImageDataset, load_arrays, make_loader, split
from .model import Net
from .utils.device import available_devices, select_device, to_device
from .utils.repro import (
    DETERMINISM_MODES,
    MAX_SEED,
    check_seed,
    configure_determinism,
    determinism_flags,
    seed_everything,
    state_dict_sha256,
)

PROG = "python -m {{ cookiecutter.project_slug }}.train"
DATASET = {{ cookiecutter.dataset|tojson }}
RUN_FILES = ("config.json", "environment.json", "metrics.csv", "model.pt", "summary.json")
METRIC_FIELDS = ("epoch", "step", "split", "loss", "accuracy")
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
    parser.add_argument("--seed", type=_int_in(0, MAX_SEED), default={{ cookiecutter.seed }},
                        help="seeds every generator (default: %(default)s)")
    parser.add_argument("--epochs", type=_int_in(1), default=5)
    parser.add_argument("--batch-size", type=_int_in(1), default=64)
    parser.add_argument("--lr", type=_positive_float, default=0.05, help="peak learning rate")
    parser.add_argument("--num-workers", type=_int_in(0), default=0,
                        help="DataLoader worker processes; the result does not depend on it")
    parser.add_argument("--threads", type=_int_in(1), default=1,
                        help="CPU threads for torch's intra-op parallelism; part of the config "
                             "because results can depend on it (default: %(default)s, not the "
                             "machine's core count)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--deterministic", choices=DETERMINISM_MODES,
                        default={{ cookiecutter.determinism|tojson }},
                        help="strict: error on a non-deterministic op; warn: warn; off: fastest")
    parser.add_argument("--out", type=Path, default=None,
                        help="run folder (default: runs/seed<SEED>)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run already in --out")
    # One clear line and exit 2 for a user's mistake, instead of the usage block.
    parser.error = lambda message: parser.exit(2, f"{PROG}: error: {message}\n")
    return parser


def make_config(args: argparse.Namespace) -> dict:
    """Every setting that can change the result. Two runs with equal configs (and environments)
    give equal weights; where a run writes its files is not part of that."""
    return {
        "seed": args.seed,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "num_workers": args.num_workers,
        "threads": args.threads,
        "device": args.device,
        "deterministic": args.deterministic,
        "dataset": DATASET,
        "width": 32,
        "dropout": 0.25,
    }


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
    return {"loss": loss_sum / count, "accuracy": correct / count}


# ---------------------------------------------------------------------------------------------
# The run folder
# ---------------------------------------------------------------------------------------------

def prepare_out_dir(out: Path, overwrite: bool) -> str | None:
    """Returns a refusal message, or None once `out` is ready. Never touches a run unless asked."""
    if out.exists() and not out.is_dir():
        return f"--out {out} exists and is not a folder"
    existing = [name for name in RUN_FILES if (out / name).exists()]
    if existing and not overwrite:
        return (f"--out {out} already holds a run ({', '.join(existing)}); "
                "pass --overwrite to replace it, or choose another --out")
    for name in existing:
        (out / name).unlink()
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    return None


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


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
        "determinism": determinism_flags(),
        "environment_variables": {name: os.environ.get(name) for name in RECORDED_ENV},
        "git_commit": git_commit(),
    }


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = make_config(args)
    out = args.out if args.out is not None else Path("runs") / f"seed{config['seed']}"

    # Every check of the user's input comes first, before any global state changes: a mistake
    # gets one line and exit 2, and an earlier run in --out is never touched.
    try:
        device = select_device(config["device"])  # only asks what exists; CUDA stays uninitialised
    except ValueError as error:
        parser.error(str(error))
    refusal = prepare_out_dir(out, args.overwrite)
    if refusal:
        parser.error(refusal)

    # 1. Determinism before anything touches the GPU: CUDA reads CUBLAS_WORKSPACE_CONFIG once.
    configure_determinism(config["deterministic"])
    # 2. A fixed thread count: intra-op parallelism splits reductions by thread, so the default
    #    (one thread per core) would make results depend on the machine.
    torch.set_num_threads(config["threads"])
    # 3. Seeds last, right before the first draw: model initialisation.
    seed_everything(check_seed(config["seed"]))

    train_arrays, val_arrays = split(*load_arrays(config["dataset"], config["seed"]), config["seed"])
    train_set = ImageDataset(*train_arrays, seed=config["seed"], train=True)
    val_set = ImageDataset(*val_arrays, seed=config["seed"], train=False)
    train_loader = make_loader(train_set, config["batch_size"], config["seed"], shuffle=True,
                               num_workers=config["num_workers"])
    val_loader = make_loader(val_set, 256, config["seed"], shuffle=False,
                             num_workers=config["num_workers"])

    model = Net(NUM_CLASSES, width=config["width"], dropout=config["dropout"]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"],
                                weight_decay=config["weight_decay"])
    total_steps = config["epochs"] * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config["lr"], total_steps=total_steps)

    write_json(out / "config.json", config)
    write_json(out / "environment.json", describe_environment(device))
    interactive = sys.stderr.isatty()
    step = 0
    start = time.perf_counter()
    with open(out / "metrics.csv", "w", newline="", encoding="utf-8") as metrics_file:
        metrics = csv.DictWriter(metrics_file, fieldnames=METRIC_FIELDS)
        metrics.writeheader()
        model.train()
        for epoch in range(config["epochs"]):
            train_loader.sampler.set_epoch(epoch)
            for batch in tqdm(train_loader, desc=f"epoch {epoch + 1}/{config['epochs']}",
                              disable=not interactive, leave=False):
                loss, accuracy = train_one_step(model, batch, optimizer, scheduler, device)
                step += 1
                # repr() of a float round-trips exactly, so two runs compare bit for bit.
                metrics.writerow({"epoch": epoch, "step": step, "split": "train",
                                  "loss": repr(loss), "accuracy": repr(accuracy)})
            result = evaluate(model, val_loader, device)
            metrics.writerow({"epoch": epoch, "step": step, "split": "val",
                              "loss": repr(result["loss"]), "accuracy": repr(result["accuracy"])})
            metrics_file.flush()
            print(f"epoch {epoch + 1}/{config['epochs']}  step {step}  "
                  f"val_loss {result['loss']:.4f}  val_accuracy {result['accuracy']:.4f}", flush=True)
    train_seconds = time.perf_counter() - start

    torch.save(model.state_dict(), out / "model.pt")
    summary = {
        "seed": config["seed"],
        "weights_sha256": state_dict_sha256(model.state_dict()),
        "train_seconds": train_seconds,
        "steps": step,
        "val_loss": result["loss"],
        "val_accuracy": result["accuracy"],
    }
    write_json(out / "summary.json", summary)
    print(f"weights_sha256 {summary['weights_sha256']}  val_accuracy {result['accuracy']:.4f}  "
          f"train_seconds {train_seconds:.1f}  -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
