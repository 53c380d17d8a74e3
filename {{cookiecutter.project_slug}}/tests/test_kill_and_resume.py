"""A run killed mid-epoch and resumed with --resume ends with the weights, and every metrics row,
of the run that never stopped.

The kill comes at a step the test chooses, however loaded the machine: the run is started with a
hook before every optimizer step (torch's own, for any optimizer), which before that step writes a
marker and waits for the signal. Nothing else is changed: what the run had written since its last
checkpoint stays on disk, as a real kill leaves it, and the resume must cut it off and write it
again. This file needs nothing else of the tests.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from {{ cookiecutter.project_slug }} import task

from conftest import settings

PACKAGE = "{{ cookiecutter.project_slug }}"
SRC = Path(__file__).resolve().parents[1] / "src"
SHORT = ("--epochs", "2", "--device", "cpu", "--max-samples", "128", "--batch-size", "16")
HELD = """
import os, signal, sys
from pathlib import Path
from torch.optim.optimizer import register_optimizer_step_pre_hook
from {package} import train

hold_at, marker, steps = int(sys.argv[1]), Path(sys.argv[2]), []

def hold(optimizer, args, kwargs):  # before every optimizer.step() of this process
    steps.append(1)
    if len(steps) == hold_at:
        marker.write_text(str(os.getpid()))
        signal.pause()  # until the test's SIGKILL

register_optimizer_step_pre_hook(hold)
sys.exit(train.main(sys.argv[3:]))
"""


def start(root: Path, name: str, *args: str) -> subprocess.Popen:
    """A fresh Python running ARGS, a process group of its own (a kill reaches its loader workers
    too), its stderr in NAME.err (a file: a full pipe would block it)."""
    env = {**os.environ, "PYTHONHASHSEED": str(settings().seed),
           "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)}
    with open(root / f"{name}.err", "w") as err:
        return subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=err, env=env,
                                start_new_session=True)


def finish(process: subprocess.Popen, root: Path, name: str) -> None:
    assert process.wait(timeout=600) == 0, (root / f"{name}.err").read_text()[-3000:]


def steps_per_epoch() -> int:
    """Of a SHORT run of this project's task (128 samples at most, 16 a batch)."""
    train_set, _ = task.make_datasets(settings())
    return math.ceil(min(len(train_set), 128) / 16)


def test_a_run_killed_mid_epoch_and_resumed_ends_as_the_run_that_never_stopped(tmp_path):
    reference, killed, marker = tmp_path / "reference", tmp_path / "killed", tmp_path / "held"
    hold_at = steps_per_epoch() + steps_per_epoch() // 2 + 1  # in epoch 2, after epoch 1's checkpoint
    never_stopped = start(tmp_path, "reference", "-m", f"{PACKAGE}.train", "--out", str(reference), *SHORT)
    held = start(tmp_path, "killed", "-c", HELD.format(package=PACKAGE), str(hold_at), str(marker),
                 "--out", str(killed), *SHORT)
    while not marker.exists():  # a state, not a duration
        assert held.poll() is None, (tmp_path / "killed.err").read_text()[-3000:]
        time.sleep(0.02)
    os.killpg(held.pid, signal.SIGKILL)  # the whole process group: loader workers too
    held.wait()
    assert not (killed / "summary.json").exists()

    resumed = start(tmp_path, "resumed", "-m", f"{PACKAGE}.train", "--out", str(killed), "--resume",
                    "--num-workers", "2")  # the worker count may change: it changes nothing
    finish(resumed, tmp_path, "resumed")
    finish(never_stopped, tmp_path, "reference")
    # Every row, every digit; a row that differs is named, with the step where the two runs part.
    resumed_rows, reference_rows = ((run / "metrics.csv").read_text().splitlines() for run in (killed, reference))
    parted = next((line for line, (a, b) in enumerate(zip(resumed_rows, reference_rows, strict=False)) if a != b), None)
    assert parted is None, (f"the resumed run parts from the one that never stopped at metrics.csv line {parted + 1} "
                            f"(epoch,step,...): resumed {resumed_rows[parted]!r}, never stopped "
                            f"{reference_rows[parted]!r}; it was killed after step {hold_at}")
    assert len(resumed_rows) == len(reference_rows), (len(resumed_rows), len(reference_rows))
    assert weights_sha256(killed) == weights_sha256(reference), "every row equal, yet other final weights"
    # Its summary too (the steps of the whole run, not of the resumed part), all but the times it took.
    resumed_summary, reference_summary = (summary_of(run) for run in (killed, reference))
    assert resumed_summary == reference_summary, (resumed_summary, reference_summary)


def summary_of(run: Path) -> dict:
    """summary.json less its figures of time (train_seconds; in the research size the throughput too,
    samples_per_second and the like), which no two runs share."""
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    return {name: value for name, value in summary.items() if "second" not in name}


def weights_sha256(run: Path) -> str:
    return json.loads((run / "summary.json").read_text(encoding="utf-8"))["weights_sha256"]
