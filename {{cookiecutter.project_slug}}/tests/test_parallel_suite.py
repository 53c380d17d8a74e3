"""Specifications of how this suite runs: a plain `pytest` spreads its files over the cores it may use.

Most tests wait on a training process they started (a fresh interpreter imports torch: seconds of
one core), so one pytest process leaves the other cores idle. pyproject.toml asks pytest-xdist for
`-n auto --dist loadfile`, and tests/conftest.py says how many workers that means.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import pytest_xdist_auto_num_workers

PLAIN = "not distributed and not slow"  # pyproject.toml's -m


def invoked(*args: str, markexpr: str = PLAIN) -> SimpleNamespace:
    """What pytest's config holds for `pytest ARGS -m MARKEXPR` in this project (testpaths: tests)."""
    return SimpleNamespace(args=list(args) or ["tests"], option=SimpleNamespace(markexpr=markexpr),
                           getini=lambda name: {"testpaths": ["tests"]}[name])


def allowed_cores(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """This process may run on `count` CPUs (as a container or `taskset` allows), on a machine of 64."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(count)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)


def test_a_plain_pytest_takes_a_worker_a_core_it_may_use_and_keeps_each_files_tests_together(monkeypatch):
    addopts = re.search(r'^addopts = "(.*)"$', (Path(__file__).parents[1] / "pyproject.toml").read_text(),
                        re.MULTILINE)[1]
    assert f"-m '{PLAIN}'" in addopts and "-n auto" in addopts and "--dist loadfile" in addopts
    allowed_cores(monkeypatch, 3)  # not the machine's 64, nor its physical cores (xdist's count with psutil)
    assert pytest_xdist_auto_num_workers(invoked()) == 3
    assert pytest_xdist_auto_num_workers(invoked("tests")) == 3
    assert pytest_xdist_auto_num_workers(invoked("tests/")) == 3  # as a shell completes it


def test_on_one_core_a_plain_pytest_runs_in_one_process_and_xdists_variable_still_decides(monkeypatch):
    allowed_cores(monkeypatch, 1)
    assert pytest_xdist_auto_num_workers(invoked()) == 0  # one worker would only add its start
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "4")
    assert pytest_xdist_auto_num_workers(invoked()) is None  # None: xdist reads its variable


def test_a_file_or_test_named_and_another_selection_run_in_one_process():
    """No worker to start for one test (and a breakpoint stops where you type); `-m distributed`
    and `-m slow` start torchrun's processes and compile, which take every core themselves."""
    assert pytest_xdist_auto_num_workers(invoked("tests/test_config.py")) == 0
    assert pytest_xdist_auto_num_workers(invoked("tests/test_config.py::test_one", "tests/test_loop.py")) == 0
    assert pytest_xdist_auto_num_workers(invoked(markexpr="distributed")) == 0
    assert pytest_xdist_auto_num_workers(invoked(markexpr="slow")) == 0
    assert pytest_xdist_auto_num_workers(invoked(markexpr=f"{PLAIN} and not cuda")) == 0  # a -m of yours
