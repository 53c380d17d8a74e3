"""Windows, faked where that is honest: the core imports without POSIX's fcntl, and a training
process refuses at its very start, in one line naming what is POSIX-only."""

from __future__ import annotations

import os

import pytest
from core_helpers import run_python
from repro_core.engine import startup


def test_a_posix_system_has_no_platform_problem() -> None:
    assert os.name == "posix" and startup.platform_problem() is None


def test_elsewhere_the_problem_names_what_is_posix_only_and_where_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "name", "nt")
    problem = startup.platform_problem()
    assert problem is not None and "Linux or macOS" in problem and "WSL" in problem
    assert all(word in problem for word in ("flock", "PYTHONHASHSEED", "execv"))


def test_the_relaunch_refuses_in_one_line_before_it_changes_anything(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "name", "nt")
    before = dict(os.environ)
    with pytest.raises(SystemExit) as stopped:
        startup.relaunch_with_run_environment(["--seed", "3"], 42, "python -m pkg.train")
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m pkg.train: error: training needs Linux or macOS")
    assert dict(os.environ) == before  # no PYTHONHASHSEED set, no re-execution marker


def test_every_module_of_the_core_imports_where_fcntl_does_not_exist() -> None:
    """Windows has no fcntl: None in sys.modules makes `import fcntl` raise ImportError, as there."""
    result = run_python("""
        import importlib, pkgutil, sys
        sys.modules["fcntl"] = None
        import repro_core
        names = [m.name for m in pkgutil.walk_packages(repro_core.__path__, "repro_core.")]
        for name in names:
            importlib.import_module(name)
        print(len(names))
    """)
    assert int(result.stdout) >= 20
