"""What a run records of the machine and software it ran on (environment.json), and what differs.

PyTorch promises bitwise equality only on the same machine and software stack; ENVIRONMENT_KEYS
are the entries that promise depends on, the rest is informative.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import torch

from .device import available_devices
from .hashseed import hash_seed_in_effect
from .repro import determinism_flags
from .runs import RunError, read_json

# What must match for PyTorch to promise bitwise equality; other environment keys are informative.
ENVIRONMENT_KEYS = ("python", "torch", "numpy", "cuda", "cudnn", "device", "device_name", "intra_op_threads",
                    "python_hash_seed", "determinism", "platform", "world_size")
# Environment variables that change results or say how they were obtained; recorded per run.
RECORDED_ENV = ("CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "CUDA_LAUNCH_BLOCKING")


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


def differences(a: dict, b: dict, keys: tuple[str, ...] | None = None) -> list[str]:
    """'key: value_a -> value_b' for each key whose values differ."""
    names = keys if keys is not None else tuple(dict.fromkeys([*a, *b]))
    return [f"{name}: {a.get(name)!r} -> {b.get(name)!r}" for name in names if a.get(name) != b.get(name)]


def environment_differences(recorded: dict, now: dict) -> list[str]:
    """What differs, among the entries that bitwise equality depends on."""
    return differences(recorded, now, ENVIRONMENT_KEYS)


def environment_changes(out: Path, now: dict) -> list[str]:
    """What differs, among the entries that bitwise equality depends on, between the environment
    recorded when the run in `out` started and `now`."""
    try:
        recorded = read_json(out / "environment.json", required=False)
    except RunError as error:
        return [str(error)]
    if recorded is None:
        return ["environment.json is missing"]
    return environment_differences(recorded, now)
