"""The core's mutation suite (breaks/core.toml): each break of core/src/repro_core/, applied to a
copy of core/, makes the core test named for it fail; the copy is imported first (PYTHONPATH), in
the test's children too. No bake: a break costs the one test it names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, load

breaks = load("breaks", ROOT / "scripts" / "breaks.py")
CORE_BREAKS = breaks.load("core")

pytestmark = pytest.mark.slow


def test_each_break_of_the_core_names_a_test_of_the_core_that_exists():
    names = [brk.name for brk in CORE_BREAKS]
    assert len(names) >= 12 and len(set(names)) == len(names)
    for brk in CORE_BREAKS:
        path, name = brk.caught_by.split("::")
        assert re.fullmatch(r"tests/test_core_\w+\.py", path) and brk.why, brk.name
        assert f"def {name}(" in (ROOT / "core" / path).read_text(encoding="utf-8"), brk.caught_by


@pytest.fixture(scope="module")
def core_copy(tmp_path_factory) -> Path:
    """core/ copied to a folder named as its package, so that breaks.apply finds src/repro_core/ in it."""
    copy = tmp_path_factory.mktemp("core") / "repro_core"
    shutil.copytree(ROOT / "core", copy, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    return copy


@pytest.mark.parametrize("brk", CORE_BREAKS, ids=[brk.name for brk in CORE_BREAKS])
def test_each_break_of_the_core_makes_its_test_fail(brk, core_copy):
    path, original = breaks.apply(core_copy, brk)
    env = {**os.environ, "PYTHONPATH": str(core_copy / "src")}
    env = {key: value for key, value in env.items() if not key.startswith("PYTEST_")}
    try:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", brk.caught_by],
                                cwd=core_copy, env=env, capture_output=True, text=True, timeout=900)
    finally:
        path.write_text(original, encoding="utf-8")
    assert result.returncode == 1 and re.search(r"\d+ failed\b", result.stdout), (
        f"{brk.caught_by} did not fail with the break {brk.name} ({brk.why}):\n{result.stdout[-3000:]}")
    # and it failed for the copy: the package it imported is the broken one
    assert str(core_copy) in subprocess.run(
        [sys.executable, "-c", "import repro_core; print(repro_core.__file__)"], env=env, capture_output=True,
        text=True).stdout


def test_the_copy_unbroken_passes_every_test_the_breaks_name(core_copy):
    """The control: without a break, the named tests pass on the copy."""
    env = {key: value for key, value in {**os.environ, "PYTHONPATH": str(core_copy / "src")}.items()
           if not key.startswith("PYTEST_")}
    wanted = sorted({brk.caught_by for brk in CORE_BREAKS})
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *wanted], cwd=core_copy,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
