"""Specifications for your own data and model: written the usual way, they keep every guarantee.

The dataset below is what a user writes without reading our code: a plain `__getitem__` whose
transform draws from Python's `random`, NumPy's global generator and torch's, as torchvision and
albumentations transforms do. It goes in through `make_datasets` and a different model through
`make_model` (as if data.py and model.py had been edited), and the runs still give identical
weights with 0, 2 and 3 loader workers, and after a SIGKILL and --resume.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from conftest import PACKAGE, once, python_env, read_run, start, value_of, wait_until

USER_CODE = """
import random, signal, sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

import {package}.data, {package}.model


class Noisy(Dataset):
    def __init__(self, n, offset):
        generator = torch.Generator().manual_seed(1234 + offset)  # fixed data, like files on disk
        self.x = torch.randn(n, 6, generator=generator)
        self.y = (self.x.sum(dim=1) > 0).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i] * random.uniform(0.9, 1.1)        # Python's random
        x = x + float(np.random.normal(0.0, 0.1))        # NumPy's global generator
        x = x * (torch.rand(6) > 0.1)                    # torch's global generator
        return x, self.y[i]


def make_datasets(config):
    return Noisy(192, 0), Noisy(64, 1)


def make_model(config):
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 2))


{package}.data.make_datasets = make_datasets  # as if data.py and model.py said so
{package}.model.make_model = make_model
from {package}.runs import MetricsLog
from {package}.train import main

hold_at, marker, write = int(sys.argv[1]), Path(sys.argv[2]), MetricsLog.write

def write_then_hold(log, epoch, step, split, loss, accuracy):
    write(log, epoch, step, split, loss, accuracy)
    if split == "train" and step == hold_at:
        log.sync()
        marker.write_text("held")
        signal.pause()  # the test kills the whole process group here

MetricsLog.write = write_then_hold
sys.exit(main(sys.argv[3:]))
"""
FLAGS = ("--epochs", "3", "--batch-size", "32", "--device", "cpu", "--checkpoint-every", "4")


def start_user_run(root: Path, name: str, *flags: str, hold_at: int = 0):
    marker = root / f"{name}.held"
    code = USER_CODE.format(package=PACKAGE)
    # Started with -c, so the package does not relaunch itself: set the hash seed it would set.
    seed = flags[flags.index("--seed") + 1] if "--seed" in flags else "7"
    process = start([sys.executable, "-c", code, str(hold_at), str(marker), "--out", str(root / name), *FLAGS,
                     *flags], root / f"{name}.log", env=python_env(PYTHONHASHSEED=seed))
    return process, marker


def user_runs(root: Path) -> dict:
    plain = {"workers0": ("--seed", "7"), "workers2_persistent": ("--seed", "7", "--num-workers", "2",
                                                                  "--persistent-workers"),
             "seed8_workers2": ("--seed", "8", "--num-workers", "2")}
    processes = {name: start_user_run(root, name, *flags)[0] for name, flags in plain.items()}
    # 3 workers, killed (with its workers) two steps after its checkpoint at step 8, then resumed.
    killed, marker = start_user_run(root, "workers3_killed", "--seed", "7", "--num-workers", "3", hold_at=10)
    wait_until(marker.exists, killed, "reaching step 10")
    killed.kill_group(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL
    processes["workers3_killed"] = start_user_run(root, "workers3_resumed", "--out", str(root / "workers3_killed"),
                                                  "--resume", "--num-workers", "3")[0]
    for name, process in processes.items():
        assert process.wait() == 0, f"{name}: {process.stderr[-3000:]}"
    return {name: read_run(root / name) for name in processes}


@pytest.fixture(scope="module")
def user_runs_or_failure(tmp_path_factory):
    return once(lambda: user_runs(tmp_path_factory.mktemp("user")))


@pytest.fixture
def runs_of_user_code(user_runs_or_failure, request):
    return value_of(user_runs_or_failure, request)


def test_a_dataset_written_the_usual_way_gives_the_same_weights_with_0_2_and_3_workers_and_after_a_kill(
        runs_of_user_code):
    reference = runs_of_user_code["workers0"]
    assert reference.config["num_workers"] == 0 and reference.summary["steps"] == 18
    for name in ("workers2_persistent", "workers3_killed"):
        run = runs_of_user_code[name]
        assert run.config["num_workers"] in (2, 3)
        assert run.metrics == reference.metrics, name  # every step's loss, bit for bit
        assert run.weights == reference.weights, name


def test_negative_control_another_seed_gives_other_weights_with_the_users_code(runs_of_user_code):
    other = runs_of_user_code["seed8_workers2"]
    assert other.weights != runs_of_user_code["workers0"].weights
    assert other.train_losses != runs_of_user_code["workers0"].train_losses
