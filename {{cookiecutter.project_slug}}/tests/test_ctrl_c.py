"""Ctrl-C in any command ends it with one line and exit status 130 (128 + SIGINT, as a shell
reports it), never a KeyboardInterrupt traceback; a training child it started stops with it.
(What train does with Ctrl-C mid-run, finish the step and checkpoint, is tests/test_resume.py's.)"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from {{ cookiecutter.project_slug }}.engine.cli import run_command

from conftest import PACKAGE, alive, ended_in_time, python_env, start_module, wait_until


def test_run_command_turns_a_keyboard_interrupt_into_one_line_and_130(capsys):
    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_command("plot", interrupted) == 130
    err = capsys.readouterr().err.strip()
    assert err == "python -m {{ cookiecutter.project_slug }}.plot: interrupted (Ctrl-C)"


@pytest.mark.parametrize("command, started", [("verify", "re-running"), ("doctor", "determinism in effect:")])
def test_ctrl_c_in_a_command_that_trains_ends_it_in_one_line_with_exit_130(command, started, runs, tmp_path):
    args = [str(runs["seed7"].path)] if command == "verify" else []
    process = start_module(command, *args, log=tmp_path / command)

    def children() -> list[int]:
        return [int(pid) for pid in open(f"/proc/{process.popen.pid}/task/{process.popen.pid}/children").read().split()]

    # Once it trains: its training children exist (the instant it forks them is the test below's).
    wait_until(lambda: started in process.stdout and children(), process, f"{command} starting its training")
    training = children()
    process.popen.send_signal(signal.SIGINT)  # the command alone, as a terminal's Ctrl-C reaches it first
    assert process.wait() == 130, process.stderr[-3000:]
    lines = process.stderr.strip().splitlines()
    assert lines[-1] == f"python -m {{ cookiecutter.project_slug }}.{command}: interrupted (Ctrl-C)", lines
    assert "Traceback" not in process.stderr
    assert all(ended_in_time(child, limit=120) for child in training if alive(child))


# Ctrl-C at the worst moment: while the training child is being forked. Python runs its at-fork
# hooks then, and a KeyboardInterrupt raised in one is printed and ignored.
CTRL_C_DURING_FORK = """
import os, signal, sys
from {package}.engine.launch import launch_training

os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))
try:
    child = launch_training("--help")
except KeyboardInterrupt:
    sys.exit(130)
child.wait()
sys.exit(0)
"""


def test_ctrl_c_while_a_command_forks_its_training_child_still_interrupts_it():
    """SIGINT is blocked while the child is forked: it arrives once Popen is done, as a
    KeyboardInterrupt the command handles, instead of vanishing in an at-fork hook."""
    done = subprocess.run([sys.executable, "-c", CTRL_C_DURING_FORK.format(package=PACKAGE)], capture_output=True,
                          text=True, env=python_env(), timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
