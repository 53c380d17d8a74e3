"""How a run takes the signals that stop it (engine/signals.py): the first SIGTERM, Ctrl-C or
parent-death signal asks for a stop after the current step, with a checkpoint; a second SIGTERM
or Ctrl-C means "now, without one". The parent-death signal never means now: the kernel sends it
again for each thread of a dying parent that exits, so a launcher with threads sends it several
times. (A run stopped by each, end to end: tests/test_resume.py, test_one_writer.py and, under
torchrun, test_distributed.py.)"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from {{ cookiecutter.project_slug }}.engine.signals import PARENT_DIED, PASSED_ON

from conftest import PACKAGE, python_env

# Two signals to this process inside StopSignals, then what the stop request holds.
TWO_SIGNALS = """
import os, signal, sys, time
from {package}.engine.signals import PARENT_DIED, PASSED_ON, StopSignals

OURS = dict(PARENT_DIED=PARENT_DIED, PASSED_ON=PASSED_ON)
first, second = (OURS.get(name) or getattr(signal, name) for name in sys.argv[1:])
with StopSignals() as stop:
    os.kill(os.getpid(), first)  # a signal to oneself is handled before os.kill returns to Python code
    print("second signal at", time.time(), file=sys.stderr, flush=True)
    os.kill(os.getpid(), second)
    print("stop requested by", next((name for name, signum in OURS.items() if signum == stop.signum), None)
          or signal.Signals(stop.signum).name)
"""

needs_parent_death = pytest.mark.skipif(PARENT_DIED is None or not sys.platform.startswith("linux"),
                                        reason="the parent-death signal is Linux's")


def send_two(first: str, second: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", TWO_SIGNALS.format(package=PACKAGE), first, second],
                          capture_output=True, text=True, env=python_env(), timeout=120)


@needs_parent_death
def test_the_parent_death_signal_repeated_is_one_stop_request_not_an_exit():
    ended = send_two("PARENT_DIED", "PARENT_DIED")
    assert ended.returncode == 0, ended.stderr
    assert ended.stdout.strip() == "stop requested by PARENT_DIED"


@pytest.mark.parametrize("name, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_second_sigterm_or_ctrl_c_exits_at_once_without_a_checkpoint(name, status):
    ended = send_two(name, name)
    gone = time.time()
    assert ended.returncode == status, ended.stderr
    assert ended.stdout == ""  # the loop never got back to its step
    assert f"{name} again: exiting now, without a checkpoint" in ended.stderr
    second = float(ended.stderr.split("second signal at ")[1].split()[0])
    assert gone - second < 10  # at once: nothing waited for (seconds, even on a loaded machine)


@needs_parent_death
def test_a_sigterm_after_the_parent_died_still_means_now():
    ended = send_two("PARENT_DIED", "SIGTERM")
    assert ended.returncode == 143, ended.stderr
    assert "SIGTERM again: exiting now" in ended.stderr


@pytest.mark.skipif(PASSED_ON is None, reason="real-time signals are Linux's")
@pytest.mark.parametrize("first, second", [("PASSED_ON", "SIGINT"), ("SIGINT", "PASSED_ON"), ("PASSED_ON", "SIGTERM")])
def test_a_stop_that_a_study_passed_on_and_the_runs_own_ctrl_c_are_one_request(first, second):
    """A terminal's Ctrl-C reaches the run and the study, which passes it on: in either order, one
    stop after the step, with a checkpoint, named as the signal the run got itself."""
    ended = send_two(first, second)
    assert ended.returncode == 0, ended.stderr
    assert ended.stdout.strip() == f"stop requested by {'SIGTERM' if 'SIGTERM' in (first, second) else 'SIGINT'}"


@pytest.mark.skipif(PASSED_ON is None, reason="real-time signals are Linux's")
def test_a_passed_on_stop_repeated_is_one_request():
    ended = send_two("PASSED_ON", "PASSED_ON")
    assert ended.returncode == 0 and ended.stdout.strip() == "stop requested by PASSED_ON", ended.stderr
