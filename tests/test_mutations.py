"""The mutation suite (breaks/mutations.toml): each break of the generated code, applied to a
fresh bake, makes the test named for it fail; undone, the project is as it was baked.

A record of what the generated suite is proven to catch, beyond the teaching exercises. The whole
tiers' kill ratio is measured by `python scripts/breaks.py kill-ratio` (README: "The mutation suite").
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT, load
from test_exercises import make_committed_repository, run_tests, unchanged

breaks = load("breaks", ROOT / "scripts" / "breaks.py")
MUTATIONS = breaks.load("mutations")
pytestmark = pytest.mark.slow


def test_the_mutation_suite_has_at_least_30_breaks_each_named_once_with_a_reason():
    names = [brk.name for brk in MUTATIONS]
    assert len(names) >= 30 and len(set(names)) == len(names)
    assert all(brk.why and re.fullmatch(r"tests/test_\w+\.py::test_\w+", brk.caught_by) for brk in MUTATIONS)


@pytest.fixture(scope="module")
def project(cookies_session):
    result = cookies_session.bake(extra_context={"init_git": False}, template=str(ROOT))
    assert result.exit_code == 0, result.exception
    make_committed_repository(result.project_path)
    return result.project_path


def test_each_break_is_caught_by_a_test_that_plain_pytest_runs(project):
    """What makes a break's failure here count for the plain tier: its test is not one that
    `pytest` leaves out (slow, distributed, GPU only)."""
    wanted = sorted({brk.caught_by for brk in MUTATIONS})
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             *wanted], cwd=project, capture_output=True, text=True, timeout=300)
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert [test for test in wanted if not any(line.split("[")[0] == test for line in collected)] == []


@pytest.mark.parametrize("brk", MUTATIONS, ids=[brk.name for brk in MUTATIONS])
def test_each_break_of_the_mutation_suite_makes_its_test_fail(brk, project):
    assert unchanged(project), "an earlier break left the project changed"
    path, original = breaks.apply(project, brk)
    try:
        try:  # a break must be caught for what it changes, not because the file no longer compiles
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
        except SyntaxError as error:
            pytest.fail(f"the break {brk.name} leaves {path.name} uncompilable: {error}")
        result = run_tests(project, brk.caught_by)
    finally:
        path.write_text(original, encoding="utf-8")
    assert unchanged(project)
    assert result.returncode == 1 and re.search(r"\d+ (failed|errors?)\b", result.stdout), (
        f"{brk.caught_by} did not fail with the break {brk.name} ({brk.why}):\n{result.stdout[-3000:]}")
