"""One writer per run folder: a run holds a lock on its folder for its whole life, and the kernel
releases it when the run's process dies. A second train into that folder, a --resume of the live
run, and a second launch of a study are refused with one line naming the process that writes
there, exit 2, and nothing written. The live run is held at a step the test chooses (conftest's
start_held_at), so nothing here races the clock."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from {{ cookiecutter.project_slug }} import train
from {{ cookiecutter.project_slug }}.engine.run_folder import lock_folder, unlock_folder

from conftest import FAST, PACKAGE, alive, ended_in_time, python_env, start_held_at, start_module, wait_until


def files_of(folder) -> dict:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture
def live_run(tmp_path):
    """A run held after its fifth step (after its checkpoint of step 4): training, its folder locked."""
    run = tmp_path / "run"
    process, marker = start_held_at(5, run, "--out", str(run), *FAST, "--seed", "7", hash_seed="7")
    wait_until(marker.exists, process, "reaching step 5")
    yield run, process
    process.kill_group(signal.SIGKILL)
    process.popen.wait()


@pytest.mark.parametrize("flags", [("--seed", "2", "--lr", "0.01"), ("--resume",), ("--overwrite",)],
                         ids=["another run", "resume of the live run", "overwrite of the live run"])
def test_a_second_writer_into_a_folder_in_use_is_refused_naming_the_process_and_writes_nothing(
        flags, live_run, capsys):
    run, process = live_run
    before = files_of(run)
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--out", str(run), *FAST, *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is in use" in err and f"process {process.popen.pid}" in err, err
    assert files_of(run) == before


def test_the_lock_goes_with_the_process_even_when_it_is_killed(live_run):
    """SIGKILL gives no process the chance to unlock: the kernel does it, and the run resumes."""
    run, process = live_run
    process.kill_group(signal.SIGKILL)
    process.popen.wait()
    resumed = start_module("train", "--out", str(run), "--resume", log=run.parent / "resumed.log")
    assert resumed.wait() == 0, resumed.stderr[-3000:]
    assert (run / "summary.json").is_file()


def test_a_second_launch_of_a_study_is_refused_while_the_first_runs(tmp_path):
    """A study holds its folder: a second launch would start a second writer for each seed. Here
    the first is stood in for by a process that holds the study folder's lock, as a study does."""
    out = tmp_path / "study"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        f"import sys, time\nfrom pathlib import Path\nfrom {PACKAGE}.engine.run_folder import lock_folder\n"
        f"assert lock_folder(Path({str(out)!r})) is None\nprint('locked', flush=True)\nsys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=python_env())
    try:
        assert holder.stdout.readline().strip() == "locked"
        second = subprocess.run([sys.executable, "-m", f"{PACKAGE}.study", "--seeds", "0-1", "--out", str(out),
                                 *FAST], capture_output=True, text=True, env=python_env(), timeout=300)
        assert second.returncode == 2 and f"process {holder.pid}" in second.stderr, second.stderr
        assert len(second.stderr.strip().splitlines()) == 1 and list(out.iterdir()) == []
    finally:
        holder.communicate("")


def test_negative_control_one_process_may_lock_a_folder_again_and_another_after_it_unlocks(tmp_path):
    assert lock_folder(tmp_path) is None and lock_folder(tmp_path) is None  # already this process's
    other = [sys.executable, "-c", f"from pathlib import Path\nfrom {PACKAGE}.engine.run_folder import lock_folder\n"
             f"print(lock_folder(Path({str(tmp_path)!r})))"]
    assert "is in use" in subprocess.run(other, capture_output=True, text=True, env=python_env()).stdout
    unlock_folder(tmp_path)
    assert subprocess.run(other, capture_output=True, text=True, env=python_env()).stdout.strip() == "None"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_training_child_of_a_killed_study_verify_or_doctor_stops_with_it(tmp_path):
    """study, verify and doctor start each training run with engine/launch.py: when the parent
    is killed (SIGKILL: it can do nothing), the run is sent the parent-death signal, stops after
    its step with a checkpoint and ends, instead of writing on alone where a rerun would start a
    second writer. The parent here has threads, as torchrun's launcher and a study's do: the kernel
    then signals the child once for each of them that exits, and a repeat is no "exit now"."""
    run, log = tmp_path / "run", tmp_path / "child.err"
    code = ("import threading, time\n"
            "for _ in range(8):\n    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
            f"from {PACKAGE}.engine.launch import launch_training\n"
            f"child = launch_training('--out', {str(run)!r}, *{list(FAST)!r}, '--epochs', '200', stdout=None, "
            f"stderr=open({str(log)!r}, 'w'))\nprint(child.pid, flush=True)\nchild.wait()")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=python_env(),
                              start_new_session=True)
    child = int(parent.stdout.readline())
    while not any(run.glob("checkpoints/step-*.pt")):  # a state: the child is training
        assert parent.poll() is None and alive(child), "the child ended before its first checkpoint"
        time.sleep(0.02)
    parent.kill()
    parent.wait()
    assert ended_in_time(child, limit=120), "the training child outlived its killed parent"
    assert not (run / "summary.json").exists()  # stopped early (200 epochs), not finished
    said = log.read_text()
    assert "again: exiting now" not in said, said
    stop = re.search(r"its parent process died: stopped after step (\d+), checkpoint ", said)
    assert stop, said
    assert (run / "checkpoints" / f"step-{int(stop[1]):08d}.pt").exists()
