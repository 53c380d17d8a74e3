"""Every break that CI tries still applies to the code it breaks, checked in seconds.

The mutation suites (tests/test_mutations.py, tests/test_core_mutations.py) run only in the full
suite, each break a process or more: a line edited since a break was written leaves the break's
text nowhere, and the full suite then errors on that break half an hour into CI. This finds it in
the fast loop (scripts/fast.sh): each break of breaks/mutations.toml against a fresh research bake
and, for those a core test catches too, against core/ itself; each of breaks/core.toml against
core/. The exercises' patches are checked likewise by test_exercises.py (the committed patches are
those the current code gives). The independent rounds (breaks/independent*.toml) are records of
the code they were written against, tried by hand, not by CI: left out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, bake, breaks

CORE = ROOT / "core" / "src" / "repro_core"
MUTATIONS = breaks.load("mutations")


@pytest.fixture(scope="module")
def research_package(tmp_path_factory) -> Path:
    project = bake(tmp_path_factory.mktemp("bake"), {"init_git": False})
    return project / "src" / project.name


def problem(package: Path, brk: breaks.Break) -> str | None:
    """None if `brk` applies to its file under `package` and changes it; else why not, in one line."""
    try:
        source = (package / brk.file).read_text(encoding="utf-8")
        return None if breaks.broken(source, brk) != source else f"{brk.name}: changes nothing"
    except (OSError, LookupError, SyntaxError) as error:
        return f"{brk.name}: {error}"


def test_each_break_of_the_mutation_suite_applies_to_a_fresh_bake_and_the_cores_to_the_core(research_package):
    problems = [problem(research_package, brk) for brk in MUTATIONS]
    problems += [problem(CORE, brk) for brk in MUTATIONS if brk.core_caught_by]
    assert [line for line in problems if line] == []


def test_each_break_of_the_cores_own_suite_applies_to_the_core():
    assert [line for line in (problem(CORE, brk) for brk in breaks.load("core")) if line] == []


def test_negative_control_a_break_whose_line_was_edited_since_is_named_with_its_file(research_package):
    """What each test above would print for a break written against a line that has changed."""
    [brk] = [brk for brk in breaks.load("core") if brk.file.startswith("utils/")][:1]
    stale = breaks.Break(brk.name, brk.file, brk.function, brk.replace + "# edited since\n", brk.with_, "")
    assert problem(CORE, stale).startswith(f"{brk.name}: break {brk.name}: its text occurs 0 times in {brk.function}")
    moved = breaks.Break(brk.name, "utils/nowhere.py", brk.function, brk.replace, brk.with_, "")
    assert "nowhere.py" in problem(CORE, moved)
