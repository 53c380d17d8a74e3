"""The core's mutation suite (breaks/core.toml, and the breaks of breaks/mutations.toml that name a
core test as core_caught_by): each break of core/src/repro_core/, applied to a copy of core/, makes
the core test named for it fail; the copy is imported first (PYTHONPATH), in the test's children
too. No bake: a break costs the one test it names."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, breaks

# breaks/core.toml's, and the mutation suite's breaks of the core's files that a core test catches
# (breaks/mutations.toml's core_caught_by), each with that test.
OWN = breaks.load("core")
CORE_BREAKS = OWN + [dataclasses.replace(brk, caught_by=brk.core_caught_by) for brk in breaks.load("mutations")
                     if brk.core_caught_by and brk.name not in {own.name for own in OWN}]

pytestmark = pytest.mark.slow


def test_each_break_of_the_core_names_a_test_of_the_core_that_exists():
    names = [brk.name for brk in CORE_BREAKS]
    assert len(names) >= 40 and len(set(names)) == len(names)
    for brk in CORE_BREAKS:
        assert (ROOT / "core" / "src" / "repro_core" / brk.file).is_file(), brk.name  # a file of the core
        path, name = brk.caught_by.split("::")
        assert re.fullmatch(r"tests/test_core_\w+\.py", path) and brk.why, brk.name
        assert f"def {name}(" in (ROOT / "core" / path).read_text(encoding="utf-8"), brk.caught_by


# Two breaks at a time, each in a copy of its own, where there are two cores: a break's test is
# mostly the start of a Python process that imports torch, on one thread.
COPIES = max(1, min(2, os.cpu_count() or 1))


def copy_of_core(folder: Path) -> Path:
    """core/ copied to a folder named as its package, so that breaks.apply finds src/repro_core/ in it."""
    copy = folder / "repro_core"
    shutil.copytree(ROOT / "core", copy, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    return copy


@pytest.fixture(scope="module")
def core_copy(tmp_path_factory) -> Path:
    return copy_of_core(tmp_path_factory.mktemp("core"))


def environment_of(copy: Path) -> dict[str, str]:
    """The environment that imports the copy first, in the test's children too (run_pytest leaves
    this pytest's own PYTEST_ variables out)."""
    return {**os.environ, "PYTHONPATH": str(copy / "src")}


def what_went_wrong(brk, copy: Path) -> str | None:
    """Applies `brk` to `copy`, runs its test there, undoes it: None if the test failed as it must
    (and for the copy: the package it imported is the broken one), else why the break counts as not caught."""
    path, original = breaks.apply(copy, brk)
    try:
        try:  # a break must be caught for what it changes, not because the file no longer compiles
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
        except SyntaxError as error:
            return f"the break {brk.name} leaves {path.name} uncompilable: {error}"
        result = breaks.run_pytest(copy, ["-q", "-x", "-p", "no:cacheprovider", brk.caught_by], environment_of(copy))
        imported = subprocess.run([sys.executable, "-c", "import repro_core; print(repro_core.__file__)"],
                                  env=environment_of(copy), capture_output=True, text=True).stdout
    finally:
        path.write_text(original, encoding="utf-8")
    if str(copy) not in imported:
        return f"the test imported {imported.strip()}, not the broken copy in {copy}"
    if result.returncode == 1 and re.search(r"\d+ failed\b", result.stdout):
        return None
    return f"{brk.caught_by} did not fail with the break {brk.name} ({brk.why}):\n{result.stdout[-3000:]}"


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, request) -> dict:
    """Every break this session selected, tried COPIES at a time: name -> what_went_wrong."""
    selected = [item.callspec.params["brk"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_each_break_of_the_core_makes_its_test_fail"]
    copies = [copy_of_core(tmp_path_factory.mktemp("core")) for _ in range(COPIES)]
    return dict(zip([brk.name for brk in selected], breaks.try_each(selected, copies, what_went_wrong), strict=True))


@pytest.mark.parametrize("brk", CORE_BREAKS, ids=[brk.name for brk in CORE_BREAKS])
def test_each_break_of_the_core_makes_its_test_fail(brk, verdicts):
    problem = verdicts[brk.name]
    assert problem is None, problem


def test_the_copy_unbroken_passes_every_test_the_breaks_name(core_copy):
    """The control: without a break, the named tests pass on the copy."""
    env = environment_of(core_copy)
    wanted = sorted({brk.caught_by for brk in CORE_BREAKS})
    result = breaks.run_pytest(core_copy, ["-q", "-p", "no:cacheprovider", *wanted], env)
    assert result.returncode == 0, result.stdout[-3000:]
