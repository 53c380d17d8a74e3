"""A run killed mid-epoch and resumed with --resume ends with the weights, and every metrics row,
of the run that never stopped.

The kill comes at a step the test chooses, however loaded the machine: the run, started with
train.write_row wrapped, writes a marker after that step's row and waits there for the signal.
Nothing else is changed: rows the run wrote after its last checkpoint stay on disk, as a real kill
leaves them, and the resume must cut them off and write them again.
"""

from __future__ import annotations

import math
import os
import signal

import torch

from {{ cookiecutter.project_slug }} import task

from conftest import FAST, PACKAGE, Run, finish, python_env, settings, start, wait_for

HELD = """
import os, signal, sys
from pathlib import Path
from {package} import train

hold_at, marker, write_row = int(sys.argv[1]), Path(sys.argv[2]), train.write_row

def write_then_hold(out, epoch, step, split, figures, rows):
    rows = write_row(out, epoch, step, split, figures, rows)
    if step == hold_at and split == "train":
        marker.write_text(str(os.getpid()))
        signal.pause()  # until the test's SIGKILL
    return rows

train.write_row = write_then_hold
sys.exit(train.main(sys.argv[3:]))
"""


def steps_per_epoch() -> int:
    """Of a FAST run of this project's task (128 samples at most, 16 a batch)."""
    train_set, _ = task.make_datasets(settings())
    return math.ceil(min(len(train_set), 128) / 16)


def test_a_run_killed_mid_epoch_and_resumed_ends_as_the_run_that_never_stopped(tmp_path):
    reference, killed, marker = tmp_path / "reference", tmp_path / "killed", tmp_path / "held"
    hold_at = steps_per_epoch() + steps_per_epoch() // 2 + 1  # in epoch 2, after epoch 1's checkpoint
    never_stopped = start(["-m", f"{PACKAGE}.train", "--out", str(reference), *FAST], reference)
    held = start(["-c", HELD.format(package=PACKAGE), str(hold_at), str(marker), "--out", str(killed), *FAST],
                 killed, env=python_env(PYTHONHASHSEED=str(settings().seed)))
    wait_for(marker, held)
    os.killpg(held.pid, signal.SIGKILL)  # the whole process group: loader workers too
    held.wait()

    counted = torch.load(killed / "checkpoint.pt", weights_only=True)["rows"]
    written = len((killed / "metrics.csv").read_text().splitlines()) - 1  # less the header
    assert written > counted and not (killed / "summary.json").exists()  # killed after rows it must write again

    resumed = start(["-m", f"{PACKAGE}.train", "--out", str(killed), "--resume", "--num-workers", "2"], tmp_path / "r")
    finish(resumed, tmp_path / "r")
    finish(never_stopped, reference)
    assert Run(killed).weights == Run(reference).weights
    assert (killed / "metrics.csv").read_bytes() == (reference / "metrics.csv").read_bytes()
