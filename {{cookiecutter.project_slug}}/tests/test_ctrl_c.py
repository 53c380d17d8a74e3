"""Ctrl-C in any command ends it with one line and exit status 130 (128 + SIGINT, as a shell
reports it), never a KeyboardInterrupt traceback; a training child it started stops with it.
(What train does with Ctrl-C mid-run, finish the step and checkpoint, is tests/test_resume.py's.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from {{ cookiecutter.project_slug }}.engine.cli import run_command

from conftest import HANG, PACKAGE, ended_in_time, python_env, start_module, wait_until


def test_run_command_turns_a_keyboard_interrupt_into_one_line_and_130(capsys):
    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_command("plot", interrupted) == 130
    err = capsys.readouterr().err.strip()
    assert err == "python -m {{ cookiecutter.project_slug }}.plot: interrupted (Ctrl-C)"


# Imported first by every Python process the command starts (sitecustomize, from PYTHONPATH): a
# training child writes its pid and waits there, so that the test signals the command while its child
# lives, however loaded the machine: a state to wait on, not a moment to catch.
HOLD_TRAINING = """
import os, sys, time
if "-m" in sys.orig_argv and "PACKAGE.train" in sys.orig_argv:
    with open(os.environ["TRAINING_CHILDREN"], "a") as file:
        file.write(str(os.getpid()) + "\\n")
    while True:
        time.sleep(0.05)
"""


@pytest.mark.parametrize("command", ["verify", "doctor"])
def test_ctrl_c_in_a_command_that_trains_ends_it_in_one_line_with_exit_130(command, runs, tmp_path):
    (tmp_path / "hold").mkdir()
    (tmp_path / "hold" / "sitecustomize.py").write_text(HOLD_TRAINING.replace("PACKAGE", PACKAGE), encoding="utf-8")
    children = tmp_path / "children"
    env = python_env(TRAINING_CHILDREN=str(children))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hold"), env["PYTHONPATH"]])
    args = [str(runs["seed7"].path)] if command == "verify" else []
    process = start_module(command, *args, log=tmp_path / command, env=env)
    wait_until(lambda: children.exists() and children.read_text().endswith("\n"), process,
               f"{command} starting its training")
    training = [int(pid) for pid in children.read_text().split()]
    process.popen.send_signal(signal.SIGINT)  # the command alone, as a terminal's Ctrl-C reaches it first
    assert process.wait() == 130, process.stderr[-3000:]
    lines = process.stderr.strip().splitlines()
    assert lines[-1] == f"python -m {{ cookiecutter.project_slug }}.{command}: interrupted (Ctrl-C)", lines
    assert "Traceback" not in process.stderr
    assert all(ended_in_time(child) for child in training)  # HANG: a limit that only ends a hang


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
                          text=True, env=python_env(), timeout=HANG)
    assert done.returncode == 130, done.stderr[-2000:]
