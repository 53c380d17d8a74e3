"""The maintainer's named sessions (`nox -l` lists them; `nox -s NAME` runs one).

Every session runs in the repository's .venv, which scripts/setup_env.sh makes (once) from
requirements-dev.txt, with the core (core/) installed editable: nox makes no virtualenvs of its
own, so a session costs no install, and CI's `bash .ci/run` and `nox -s full` run the same thing.

    lint          ruff over the template's code, the core and the examples
    core          the core's own unit tests (core/tests/): no bake, about a minute
    examples      the core in an existing project: a plain PyTorch script and a Lightning one
    fast          the fast loop: a bake of the defaults, linted, then the template's tests that train nothing
    combination   one named option combination of tests/test_bake.py, baked, linted, its suite run:
                  nox -s "combination(name='teaching')"
    full          everything CI runs (bash .ci/run runs the same script)
    regenerate    every committed generated file: the core's copies, copier.yml, the exercises'
                  patches, the sizes table; `nox -s regenerate -- pictures` redraws the study
                  pictures too (about 5 minutes)
"""

from __future__ import annotations

import ast
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
PY = str(ROOT / ".venv" / "bin" / "python")
nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "core", "examples"]


def combination_names() -> list[str]:
    """The keys of tests/test_bake.py's COMBINATIONS, read without importing the test module."""
    tree = ast.parse((ROOT / "tests" / "test_bake.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMBINATIONS" for t in node.targets):
            return [key.value for key in node.value.keys]
    raise LookupError("tests/test_bake.py has no COMBINATIONS")


def setup(session: nox.Session) -> None:
    """.venv made or brought up to date with requirements-dev.txt (a no-op when it matches)."""
    session.run("bash", "-c", 'source scripts/setup_env.sh', external=True)


@nox.session
def lint(session: nox.Session) -> None:
    setup(session)
    session.run(PY, "-m", "ruff", "check", ".", external=True)


@nox.session
def core(session: nox.Session) -> None:
    setup(session)
    session.run(PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "core/tests", *session.posargs, external=True)


@nox.session
def examples(session: nox.Session) -> None:
    setup(session)
    session.run(PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples", *session.posargs, external=True)


@nox.session
def fast(session: nox.Session) -> None:
    session.run("bash", "scripts/fast.sh", *session.posargs, external=True)


@nox.session
@nox.parametrize("name", combination_names())
def combination(session: nox.Session, name: str) -> None:
    """test_bake's checks of one combination (files, lint, schema) and its whole plain suite."""
    setup(session)
    session.run(PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_bake.py",
                "-k", f"[{name}] or [{name}-", *session.posargs, external=True)


@nox.session
def full(session: nox.Session) -> None:
    session.run("bash", "scripts/test.sh", *session.posargs, external=True)


@nox.session
def regenerate(session: nox.Session) -> None:
    setup(session)
    session.run(PY, "scripts/vendor_core.py", external=True)
    session.run(PY, "scripts/generate_copier.py", external=True)
    session.run(PY, "scripts/breaks.py", "patches", external=True)
    session.run(PY, "scripts/sizes.py", "--readme", external=True)
    if "pictures" in session.posargs:
        session.run("bash", "scripts/picture.sh", external=True)
