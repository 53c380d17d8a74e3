"""The run folder: every file a run writes, its writers and readers together, in one schema.

    config.json       every setting of the run (config.Config: the single source of truth)
    environment.json  versions, devices, determinism flags and environment variables in effect
    metrics.csv       one row per optimizer step (split=train) and per evaluation (split=val)
    checkpoints/      the last few checkpoints, for --resume
    tensorboard/      with --tensorboard: the same metrics as TensorBoard event files
    model.pt          the final state_dict (load it with torch.load(..., weights_only=True))
    summary.json      seeds, device, weights_sha256, train_seconds and the final evaluation

Metrics are written as repr() of each float, which round-trips exactly, and compared as those
strings, so "equal" here means equal bit for bit.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .checkpoint import atomic_write, atomic_write_text
from .utils.device import available_devices
from .utils.hashseed import hash_seed_in_effect
from .utils.repro import determinism_flags, state_dict_sha256

RUN_FILES = ("config.json", "environment.json", "metrics.csv", "model.pt", "summary.json", "checkpoints", "tensorboard")
METRIC_FIELDS = ("epoch", "step", "split", "loss", "accuracy")
# What must match for PyTorch to promise bitwise equality; other environment keys are informative.
ENVIRONMENT_KEYS = ("python", "torch", "numpy", "cuda", "cudnn", "device", "device_name", "intra_op_threads",
                    "python_hash_seed", "determinism", "platform", "world_size")
# Environment variables that change results or say how they were obtained; recorded per run.
RECORDED_ENV = ("CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "CUDA_LAUNCH_BLOCKING")


def start_training(*args: str, world_size: int = 1, **popen) -> subprocess.Popen:
    """`python -m <package>.train ARGS` in a fresh process that imports this same copy of the code,
    installed or not; for a world size above 1, under `torchrun --standalone` on this machine."""
    source = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    launcher = [sys.executable]
    if world_size > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}"]
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen([*launcher, "-m", f"{__package__}.train", *args], env=env, **popen)


# ---- writing a run --------------------------------------------------------------------------

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


def make_out_dir(out: Path) -> str | None:
    """Creates `out` and checks that a file can be written there (os.access says yes for root even
    in /proc); the reason as one line if not. Touches no run file."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / ".write-test", "")
        (out / ".write-test").unlink()
    except OSError as error:
        return f"--out {out}: cannot write there ({error.strerror or error})"
    return None


def clear_run_files(out: Path) -> None:
    """Removes the files of an earlier run (and only those: other files in `out` stay)."""
    for name in RUN_FILES:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
        elif (out / name).exists():
            (out / name).unlink()


def write_json(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


class MetricsLog:
    """metrics.csv, appended one row at a time. Every rank counts the rows; only rank 0 writes,
    and hands each row to its trackers (tracking.py) too."""

    def __init__(self, path: Path, rows: int, writes: bool, trackers: list | None = None) -> None:
        self.path, self.rows, self.writes, self.trackers = path, rows, writes, trackers or []
        self.file = None

    def start(self) -> None:
        """A new file with just the header."""
        atomic_write_text(self.path, ",".join(METRIC_FIELDS) + "\n")

    def cut_back(self) -> None:
        """Keeps the header and the first `rows` rows: those a checkpoint had seen. Rows written
        after it, possibly torn by a kill, are written again by the resumed run."""
        with open(self.path, newline="", encoding="utf-8") as file:
            kept = file.read().splitlines(keepends=True)[: 1 + self.rows]
        atomic_write_text(self.path, "".join(kept))

    def __enter__(self) -> MetricsLog:
        if self.writes:
            self.file = open(self.path, "a", newline="", encoding="utf-8")
        return self

    def __exit__(self, *exc_info) -> None:
        if self.file is not None:
            self.file.close()

    def write(self, epoch: int, step: int, split: str, loss: float, accuracy: float) -> None:
        if self.file is not None:
            # repr() of a float round-trips exactly, so two runs compare bit for bit.
            csv.writer(self.file, lineterminator="\n").writerow([epoch, step, split, repr(loss), repr(accuracy)])
            for tracker in self.trackers:
                tracker({"epoch": epoch, "step": step, "split": split, "loss": loss, "accuracy": accuracy})
        self.rows += 1

    def sync(self) -> None:
        """Puts the rows on disk: a checkpoint that counts them is written after this."""
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())


def write_result(out: Path, config, device: torch.device, weights: dict, steps: int, seconds: float,
                 result: dict[str, float]) -> dict:
    """model.pt and summary.json, the last files a run writes; returns the summary."""
    summary = {"seed": config.seed, "data_seed": config.data_seed, "device": str(device),
               "weights_sha256": state_dict_sha256(weights), "train_seconds": seconds, "steps": steps,
               "world_size": config.world_size, "val_loss": result["loss"], "val_accuracy": result["accuracy"]}
    atomic_write(out / "model.pt", lambda file: torch.save(weights, file))
    write_json(out / "summary.json", summary)
    return summary


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


def describe_environment(device: torch.device, world_size: int, backend: str | None) -> dict:
    cuda = torch.cuda.is_available()
    return {
        "world_size": world_size,
        "distributed_backend": backend,
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


def environment_changes(out: Path, now: dict) -> list[str]:
    """What differs, among the settings that bitwise equality depends on, between the environment
    recorded when the run started and `now`."""
    try:
        recorded = read_json(out / "environment.json", required=False)
    except RunError as error:
        return [str(error)]
    if recorded is None:
        return ["environment.json is missing"]
    return differences(recorded, now, ENVIRONMENT_KEYS)


# ---- reading a run --------------------------------------------------------------------------

class RunError(Exception):
    """A run folder that cannot be read; the message is one line for the user."""


@dataclass
class Run:
    path: Path
    config: dict
    environment: dict
    metrics: list[dict]
    summary: dict | None

    @property
    def weights(self) -> str | None:
        return self.summary["weights_sha256"] if self.summary else None

    @property
    def train_losses(self) -> list[str]:
        """Per-step training losses exactly as written (repr of the float), for bitwise comparison."""
        return [row["loss"] for row in self.metrics if row["split"] == "train"]


def read_json(path: Path, required: bool) -> dict | None:
    """A JSON object from a run folder; RunError (one line) if corrupt, or missing and required."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            raise RunError(f"{path.parent} holds no run ({path.name} is missing)") from None
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunError(f"{path} is corrupt ({error})") from None
    if not isinstance(data, dict):
        raise RunError(f"{path} is corrupt (not a JSON object)")
    return data


def _read_metrics(path: Path) -> list[dict]:
    try:
        with open(path, newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            if tuple(reader.fieldnames or ()) != METRIC_FIELDS:
                raise RunError(f"{path} is corrupt (header {reader.fieldnames}, expected {list(METRIC_FIELDS)})")
            rows = list(reader)
    except FileNotFoundError:
        raise RunError(f"{path.parent} holds no run ({path.name} is missing)") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RunError(f"{path} is corrupt ({error})") from None
    for number, row in enumerate(rows, start=2):
        try:
            int(row["epoch"]), int(row["step"]), float(row["loss"]), float(row["accuracy"])
            if row["split"] not in ("train", "val"):
                raise ValueError(row["split"])
        except (TypeError, ValueError):
            raise RunError(f"{path} is corrupt (line {number} is not a metrics row)") from None
    return rows


def read_run(folder: Path) -> Run:
    """Reads config, environment, metrics and (if the run finished) summary; RunError otherwise."""
    if not folder.exists():
        raise RunError(f"{folder} does not exist")
    if not folder.is_dir():
        raise RunError(f"{folder} is not a folder")
    return Run(
        path=folder,
        config=read_json(folder / "config.json", required=True),
        environment=read_json(folder / "environment.json", required=False) or {},
        metrics=_read_metrics(folder / "metrics.csv"),
        summary=read_json(folder / "summary.json", required=False),
    )


def differences(a: dict, b: dict, keys: tuple[str, ...] | None = None) -> list[str]:
    """'key: value_a -> value_b' for each key whose values differ."""
    names = keys if keys is not None else tuple(dict.fromkeys([*a, *b]))
    return [f"{name}: {a.get(name)!r} -> {b.get(name)!r}" for name in names if a.get(name) != b.get(name)]


def first_divergence(rows_a: list[dict], rows_b: list[dict]) -> str | None:
    """Where two metric logs first differ, named by step, split and metric, with both values."""
    for row_a, row_b in zip(rows_a, rows_b, strict=False):  # lengths are compared after
        if (row_a["step"], row_a["split"]) != (row_b["step"], row_b["split"]):
            return (f"the logs part at step {row_a['step']} ({row_a['split']}) vs step {row_b['step']} "
                    f"({row_b['split']}): different evaluation schedules or lengths")
        for metric in ("loss", "accuracy"):
            if row_a[metric] != row_b[metric]:
                return f"step {row_a['step']} ({row_a['split']}), {metric}: {row_a[metric]} vs {row_b[metric]}"
    if len(rows_a) != len(rows_b):
        return f"one log has {len(rows_a)} rows, the other {len(rows_b)}; the shorter one matches up to its end"
    return None
