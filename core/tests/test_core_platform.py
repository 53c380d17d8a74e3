"""Windows, faked where that is honest: the core imports without POSIX's fcntl, and a training
process refuses at its very start, in one line naming what is POSIX-only."""

from __future__ import annotations

import os
import sys

import pytest
from core_helpers import run_python
from repro_core.engine import startup


def test_a_posix_system_has_no_platform_problem() -> None:
    assert os.name == "posix" and startup.platform_problem() is None


def test_macos_has_no_platform_problem_either(monkeypatch: pytest.MonkeyPatch) -> None:
    """POSIX, not Linux alone: flock, PYTHONHASHSEED's relaunch and execv work on a Mac too."""
    monkeypatch.setattr(sys, "platform", "darwin")
    assert os.name == "posix" and startup.platform_problem() is None


def test_elsewhere_the_problem_names_what_is_posix_only_and_where_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "name", "nt")
    problem = startup.platform_problem()
    assert problem is not None and "Linux or macOS" in problem and "WSL" in problem
    assert all(word in problem for word in ("flock", "PYTHONHASHSEED", "execv"))


def test_the_relaunch_refuses_in_one_line_before_it_changes_anything(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "name", "nt")
    monkeypatch.setattr(os, "execv", lambda *args: pytest.fail("the relaunch started Python again"))  # not pytest's
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


# --- one restart for both sizes -------------------------------------------------------------------------------

def execv_calls(path) -> list[str]:
    """Where a module calls os.execv (or imports execv by name), as 'module:function' strings."""
    import ast

    tree, found = ast.parse(path.read_text(encoding="utf-8")), []
    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute) and node.attr in ("execv", "execve", "execvp", "execl"):
                found.append(f"{path.stem}:{function.name}")
    found += [f"{path.stem}:import" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
              for alias in node.names if alias.name.startswith("exec")]
    return found


def test_the_core_restarts_the_interpreter_in_one_place_for_both_sizes() -> None:
    """One mechanism per job: the teaching size's hash-seed restart and the research size's relaunch
    (hash seed and CPU kernel pins) both start the interpreter again through hashseed.restart_with."""
    from pathlib import Path

    import repro_core

    package = Path(repro_core.__file__).parent
    assert [call for path in sorted(package.rglob("*.py")) for call in execv_calls(path)] == ["hashseed:restart_with"]


def test_the_research_relaunch_execs_through_the_one_restart_with_the_seed_and_its_marker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from repro_core.utils import hashseed

    started: list = []
    monkeypatch.setattr(startup.signal, "signal", lambda signum, handler: None)  # this process keeps its Ctrl-C
    monkeypatch.setattr(hashseed, "initial_environment", lambda: {})
    monkeypatch.setattr(hashseed, "hash_seed_in_effect", lambda: "random")
    monkeypatch.setenv(hashseed.RESTARTED, "")  # so that monkeypatch unsets it after, whatever the restart set
    monkeypatch.delenv(hashseed.RESTARTED)
    monkeypatch.setattr(os, "execv", lambda path, argv: started.append(
        (os.environ.get("PYTHONHASHSEED"), os.environ.get(hashseed.RESTARTED))))
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # restored after the test; the relaunch overwrites it
    startup.relaunch_with_run_environment(["--seed", "3"], 42, "python -m pkg.train")
    assert started == [("3", "1")]


def test_the_research_relaunch_warns_instead_of_looping_when_its_restart_did_not_take(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The guard the teaching size's restart has, the research relaunch has by the same code."""
    from repro_core.utils import hashseed

    monkeypatch.setattr(startup.signal, "signal", lambda signum, handler: None)  # this process keeps its Ctrl-C
    monkeypatch.setattr(hashseed, "hash_seed_in_effect", lambda: "random")
    monkeypatch.setenv(hashseed.RESTARTED, "1")  # this process is the restart
    monkeypatch.setattr(os, "execv", lambda path, argv: pytest.fail("restarted twice"))
    startup.relaunch_with_run_environment(["--seed", "3"], 42, "python -m pkg.train")
    assert capsys.readouterr().err == "warning: cannot set PYTHONHASHSEED=3 for this process\n"
    assert hashseed.RESTARTED not in os.environ  # its children start clean
