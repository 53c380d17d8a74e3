"""The Lightning example (lightning/train.py), run as a user runs it: each run a fresh process,
compared by the `weights_sha256` line it prints last. Skipped where lightning is not installed."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

# What pytest.importorskip("lightning", reason=...) does where lightning is absent, without importing it
# here where it is present: this process only starts the scripts, and the import takes ~6 s.
if importlib.util.find_spec("lightning") is None:
    pytest.skip("the Lightning example needs lightning (pip install lightning)", allow_module_level=True)

HERE = Path(__file__).parent


def train(script: str, *args: str) -> str:
    """Runs an example script in a fresh interpreter; returns the weights hash it printed last."""
    result = subprocess.run([sys.executable, str(HERE / script / "train.py"), "--seed", "0", "--epochs", "2", *args],
                            capture_output=True, text=True, timeout=600)  # a safety net only: a run takes seconds
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"weights_sha256 [0-9a-f]{64}", last), result.stdout
    return last.split()[1]


@cache
def lightning(*args: str) -> str:
    """One run per set of arguments, shared by the tests below."""
    return train("lightning", *args)


def test_with_the_core_zero_and_two_workers_give_the_same_weights():
    assert lightning("--num-workers", "0") == lightning("--num-workers", "2")


def test_without_the_core_zero_and_two_workers_give_other_weights():
    # the negative control: lightning.seed_everything(seed, workers=True) seeds each worker from
    # (seed, worker id, rank), so what a sample draws depends on which worker loads it
    assert lightning("--without-core", "--num-workers", "0") != lightning("--without-core", "--num-workers", "2")


def test_two_runs_with_the_core_and_one_seed_give_the_same_weights():
    assert train("lightning", "--num-workers", "2") == lightning("--num-workers", "2")


def test_with_the_core_lightning_trains_the_plain_scripts_weights():
    # two loops written apart (Lightning's and the plain script's) over one model, data and seed:
    # with the core, both draw the same order, augmentation and dropout, and end on the same bits
    assert lightning("--num-workers", "0") == train("plain", "--num-workers", "0")
