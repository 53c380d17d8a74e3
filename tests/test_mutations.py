"""The mutation suite (breaks/mutations.toml): each break of the generated code, applied to a
fresh bake, makes the test named for it fail; undone, the project is as it was baked.

A record of what the generated suite is proven to catch, beyond the teaching exercises. The whole
tiers' kill ratio is measured by `python scripts/breaks.py kill-ratio` (README: "The mutation suite").
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, breaks
from test_exercises import make_committed_repository, run_tests, unchanged

MUTATIONS = breaks.load("mutations")
# The breaks run here, against a bake: those of code only a bake holds, and those of the core's
# files that no core test catches (the others run against the core: tests/test_core_mutations.py).
IN_A_BAKE = [brk for brk in MUTATIONS if not brk.core_caught_by]
pytestmark = pytest.mark.slow


def test_the_mutation_suite_has_at_least_30_breaks_each_named_once_with_a_reason():
    names = [brk.name for brk in MUTATIONS]
    assert len(names) >= 30 and len(set(names)) == len(names)
    assert all(brk.why and re.fullmatch(r"tests/test_\w+\.py::test_\w+", brk.caught_by) for brk in MUTATIONS)


# Two breaks at a time, each in its own bake, on a machine with two cores or more: a break's test
# trains in fresh processes, mostly on one thread, so the second core would otherwise idle. The
# tests that run (kills and signals among them) are written to pass on an oversubscribed CPU.
COPIES = max(1, min(2, os.cpu_count() or 1))


@pytest.fixture(scope="module")
def projects(cookies_session) -> list:
    baked = []
    for _ in range(COPIES):
        result = cookies_session.bake(extra_context={"init_git": False}, template=str(ROOT))
        assert result.exit_code == 0, result.exception
        make_committed_repository(result.project_path)
        baked.append(result.project_path)
    return baked


def test_each_break_is_caught_by_a_test_that_plain_pytest_runs(projects):
    """What makes a break's failure here count for the plain tier: its test is not one that
    `pytest` leaves out (slow, distributed, GPU only)."""
    wanted = sorted({brk.caught_by for brk in MUTATIONS})
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             *wanted], cwd=projects[0], capture_output=True, text=True, timeout=300)
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert [test for test in wanted if not any(line.split("[")[0] == test for line in collected)] == []


def what_went_wrong(brk, project) -> str | None:
    """Applies `brk` to `project`, runs the test named for it, undoes it: None if the test failed
    as it must, else why the break counts as not caught."""
    if not unchanged(project):
        return f"an earlier break left {project} changed"
    path, original = breaks.apply(project, brk)
    try:
        try:  # a break must be caught for what it changes, not because the file no longer compiles
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
        except SyntaxError as error:
            return f"the break {brk.name} leaves {path.name} uncompilable: {error}"
        result = run_tests(project, "-x", brk.caught_by)  # its first failure is the verdict
    finally:
        path.write_text(original, encoding="utf-8")
    if not unchanged(project):
        return f"undoing the break {brk.name} left {project} changed"
    if result.returncode == 1 and re.search(r"\d+ (failed|errors?)\b", result.stdout):
        return None
    return f"{brk.caught_by} did not fail with the break {brk.name} ({brk.why}):\n{result.stdout[-3000:]}"


@pytest.fixture(scope="module")
def verdicts(projects, request) -> dict:
    """Every break that this session selected, tried COPIES at a time: name -> what_went_wrong."""
    selected = [item.callspec.params["brk"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_each_break_of_the_mutation_suite_makes_its_test_fail"]
    return dict(zip([brk.name for brk in selected], breaks.try_each(selected, projects, what_went_wrong), strict=True))


@pytest.mark.parametrize("brk", IN_A_BAKE, ids=[brk.name for brk in IN_A_BAKE])
def test_each_break_of_the_mutation_suite_makes_its_test_fail(brk, verdicts):
    problem = verdicts[brk.name]
    assert problem is None, problem
