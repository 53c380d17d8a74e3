"""Copies the core (core/src/repro_core/) into the template, byte for byte: its one source.

    python scripts/vendor_core.py           # write the template's copies
    python scripts/vendor_core.py --check   # exit 1, naming each copy that differs from the core

Like pip's src/pip/_vendor/: the copies are committed, so a baked project holds plain files with
nothing to install, and a test (tests/test_core.py) fails when a copy and its source part. Edit the
core, never a copy, then run this (or `nox -s regenerate`).

Which modules each size gets:
- both sizes: utils/ (repro.py, hashseed.py, device.py, data.py and the package's docstring), what a student
  reads first;
- the research size: also engine/'s modules that need no project. The engine's other modules
  (plan.py, endings.py, fingerprint.py, environment.py, launch.py, cli.py) and its __init__ are
  the project's own: they name its package or read its config.
Standard library only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core" / "src" / "repro_core"
PACKAGE = ROOT / "{{cookiecutter.project_slug}}" / "src" / "{{cookiecutter.project_slug}}"

STUDENT_FILES = ("utils/__init__.py", "utils/hashseed.py", "utils/repro.py", "utils/device.py", "utils/data.py")
ENGINE_FILES = tuple(f"engine/{name}.py" for name in (
    "checkpoint", "contract", "distributed", "files", "invariant", "loader", "loop", "optim", "precision",
    "run_folder", "runs", "signals", "startup", "statistics", "tracking", "world_sizes"))
VENDORED = STUDENT_FILES + ENGINE_FILES
# Jinja's opening markers: a vendored file is rendered like every template file, so it must hold none
# (the bake would then differ from the core).
JINJA_MARKERS = ("{{", "{%", "{#")  # what opens a Jinja expression, statement or comment


def differing(core: Path = CORE, package: Path = PACKAGE) -> list[str]:
    """The vendored paths whose copy in `package` is missing or differs from the core's."""
    return [path for path in VENDORED
            if not (package / path).is_file() or (package / path).read_bytes() != (core / path).read_bytes()]


def jinja_problems(core: Path = CORE) -> list[str]:
    """The core's vendored files that hold a Jinja marker, with the marker."""
    problems = []
    for path in VENDORED:
        text = (core / path).read_text(encoding="utf-8")
        problems += [f"{path}: {marker!r}" for marker in JINJA_MARKERS if marker in text]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say which copies differ (exit 1 if any)")
    args = parser.parse_args(argv)
    problems = jinja_problems()
    if problems:
        print("error: the core must hold no Jinja markers (its copies are rendered):\n  " + "\n  ".join(problems),
              file=sys.stderr)
        return 1
    stale = differing()
    if args.check:
        for path in stale:
            print(f"differs from core/src/repro_core/{path}: src/{{{{cookiecutter.project_slug}}}}/{path}")
        return 1 if stale else 0
    for path in stale:
        (PACKAGE / path).write_bytes((CORE / path).read_bytes())
        print(f"vendored {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
