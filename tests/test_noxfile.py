"""The maintainer's named sessions (noxfile.py): each exists, and `combination` names exactly the
combinations tests/test_bake.py bakes."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, load
from test_bake import COMBINATIONS

noxfile = load("noxfile", ROOT / "noxfile.py")


def test_nox_lists_every_named_session():
    listed = subprocess.run([sys.executable, "-m", "nox", "-l"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    # "* NAME -> docstring" for a session run by default, "- NAME ..." for the others
    names = {line[2:].split(" ")[0].split("(")[0] for line in listed if line[:2] in ("* ", "- ")}
    assert {"lint", "core", "examples", "fast", "combination", "full", "regenerate"} <= names


def test_the_combination_session_takes_each_baked_combination_and_no_other():
    assert noxfile.combination_names() == list(COMBINATIONS)
