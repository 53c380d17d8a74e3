"""Run folders: starting a fresh run, reading one back, finding where two part. For verify, compare, doctor.

Metrics are compared as the exact strings train.py wrote (repr of each float), so "equal" here
means equal bit for bit.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

METRIC_FIELDS = ("epoch", "step", "split", "loss", "accuracy")
# What must match for PyTorch to promise bitwise equality; other environment keys are informative.
ENVIRONMENT_KEYS = ("python", "torch", "numpy", "cuda", "cudnn", "device", "device_name", "intra_op_threads",
                    "python_hash_seed", "determinism", "platform", "world_size")


def start_training(*args: str, world_size: int = 1) -> subprocess.Popen:
    """`python -m <package>.train ARGS` in a fresh process that imports this same copy of the code,
    installed or not; for a world size above 1, under `torchrun --standalone` on this machine."""
    source = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    launcher = [sys.executable]
    if world_size > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}"]
    return subprocess.Popen([*launcher, "-m", f"{__package__}.train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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
