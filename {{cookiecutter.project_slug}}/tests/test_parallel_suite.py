"""Specifications of how this suite runs: a plain `pytest` spreads its files over the machine's cores.

Most tests wait on a training process they started (a fresh interpreter imports torch: seconds of
one core), so one pytest process leaves the other cores idle. pyproject.toml asks pytest-xdist for
`-n auto --dist loadfile`, and tests/conftest.py says how many workers that means.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from conftest import pytest_xdist_auto_num_workers

PLAIN = "not distributed and not slow"  # pyproject.toml's -m


def invoked(*args: str, markexpr: str = PLAIN) -> SimpleNamespace:
    """What pytest's config holds for `pytest ARGS -m MARKEXPR` in this project (testpaths: tests)."""
    return SimpleNamespace(args=list(args) or ["tests"], option=SimpleNamespace(markexpr=markexpr),
                           getini=lambda name: {"testpaths": ["tests"]}[name])


def test_a_plain_pytest_takes_a_worker_a_core_and_keeps_each_files_tests_together():
    addopts = re.search(r'^addopts = "(.*)"$', (Path(__file__).parents[1] / "pyproject.toml").read_text(),
                        re.MULTILINE)[1]
    assert f"-m '{PLAIN}'" in addopts and "-n auto" in addopts and "--dist loadfile" in addopts
    assert pytest_xdist_auto_num_workers(invoked()) is None  # xdist's own count: the cores
    assert pytest_xdist_auto_num_workers(invoked("tests")) is None
    assert pytest_xdist_auto_num_workers(invoked("tests/")) is None  # as a shell completes it


def test_a_file_or_test_named_and_another_selection_run_in_one_process():
    """No worker to start for one test (and a breakpoint stops where you type); `-m distributed`
    and `-m slow` start torchrun's processes and compile, which take every core themselves."""
    assert pytest_xdist_auto_num_workers(invoked("tests/test_config.py")) == 0
    assert pytest_xdist_auto_num_workers(invoked("tests/test_config.py::test_one", "tests/test_loop.py")) == 0
    assert pytest_xdist_auto_num_workers(invoked(markexpr="distributed")) == 0
    assert pytest_xdist_auto_num_workers(invoked(markexpr="slow")) == 0
    assert pytest_xdist_auto_num_workers(invoked(markexpr=f"{PLAIN} and not cuda")) == 0  # a -m of yours
