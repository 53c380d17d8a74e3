"""What several test files of the core share: running a fresh interpreter, and where the package lives.

Every child runs with the interpreter that runs the tests and inherits its environment (PYTHONPATH
included), so a test of a modified copy of the package tests that copy in its children too.
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch
from repro_core.utils.repro import Stream, derive_seed
from torch.utils.data import DataLoader, Dataset

PYTHON = sys.executable


def package_dir() -> Path:
    """The folder of the repro_core that `import repro_core` finds (without importing it)."""
    spec = importlib.util.find_spec("repro_core")
    assert spec is not None and spec.submodule_search_locations, "repro_core is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def child_env(set_: dict[str, str] | None = None, unset: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment with `set_` added and `unset` removed."""
    env = {key: value for key, value in os.environ.items() if key not in unset}
    env.update(set_ or {})
    return env


def run_python(code: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
               check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs `code` (dedented) as a script in a fresh interpreter and returns what it printed.
    The script is passed with -c, so sys.argv[1:] are `args`."""
    result = subprocess.run([PYTHON, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                            env=env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


class Augmented(Dataset):
    """Sample i: i plus noise drawn from torch, NumPy and Python's random, as augmentations draw."""

    def __init__(self, size: int = 22) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        noise = torch.randn(4) + torch.from_numpy(np.random.normal(size=4)).float() + random.gauss(0.0, 1.0)
        return torch.full((4,), float(index)) + noise, index


def shuffle_oracle(size: int, seed: int, epoch: int) -> list[int]:
    generator = torch.Generator().manual_seed(derive_seed(seed, Stream.SHUFFLE, epoch))
    return torch.randperm(size, generator=generator).tolist()


def indices(loader: DataLoader) -> list[int]:
    return [int(i) for _, batch in loader for i in batch]
