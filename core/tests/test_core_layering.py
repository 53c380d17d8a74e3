"""The core is one-way and light: it imports the standard library, torch, numpy and itself, nothing of a
project; importing the package imports no torch; every exported name loads on first use."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from core_helpers import package_dir, run_python

# triton: torch.compile's GPU compiler, which ships with torch's CUDA wheels; engine/precision.py only
# probes for it (`import triton` under try/except ImportError) to refuse --compile in one line.
THIRD_PARTY = {"torch", "numpy", "triton"}


def core_modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module and package of the core below `root` (the package folder)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = ["repro_core", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_problems(source: str, module: str, is_package: bool, modules: set[str]) -> list[str]:
    """Every import statement of `source` (anywhere: in functions too) that is not the standard library,
    torch, numpy, or a relative import of a module of the core; each as a few words."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in THIRD_PARTY:
                    problems.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                top = (node.module or "").split(".")[0]
                if top not in sys.stdlib_module_names and top not in THIRD_PARTY:
                    problems.append(f"from {node.module} import ...")
                continue
            dots = "." * node.level
            if node.level - 1 >= len(package):
                problems.append(f"from {dots}{node.module or ''}: above repro_core")
                continue
            base = package[: len(package) - (node.level - 1)]
            if node.module:
                target = ".".join([*base, node.module])
                if target not in modules:
                    problems.append(f"from {dots}{node.module}: {target} is no module of the core")
            else:  # `from . import x`: each name must be a module, not something of a package's namespace
                for alias in node.names:
                    target = ".".join([*base, alias.name])
                    if target not in modules:
                        problems.append(f"from {dots} import {alias.name}: {target} is no module of the core")
    return problems


def test_every_import_of_the_core_is_stdlib_torch_numpy_or_a_module_of_the_core() -> None:
    """An ast walk over every file of the installed package, imports inside functions included."""
    root = package_dir()
    modules = core_modules(root)
    assert {"repro_core.utils.repro", "repro_core.engine.checkpoint", "repro_core.engine"} <= set(modules)
    problems = {name: import_problems(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", set(modules))
                for name, path in modules.items()}
    assert {name: found for name, found in problems.items() if found} == {}


@pytest.mark.parametrize(("source", "module"), [
    ("import config", "repro_core.engine.checkpoint"),
    ("from .. import config", "repro_core.engine.checkpoint"),
    ("from .. import task", "repro_core.utils.data"),
    ("from ..train import main", "repro_core.engine.loop"),
    ("def f():\n    from ...task import Task\n", "repro_core.engine.loop"),
    ("from . import config", "repro_core.engine.loop"),
    ("from .. import __version__", "repro_core.engine.files"),
    ("import yaml", "repro_core.utils.repro"),
    ("from repro_core.utils import repro", "repro_core.engine.files"),
    ("from .missing import x", "repro_core.engine.files"),
])
def test_the_import_check_flags_what_a_project_would_import(source: str, module: str) -> None:
    """The checker above can fail: each of these is a project import or an unknown module."""
    modules = set(core_modules(package_dir()))
    assert import_problems(source, module, False, modules)


@pytest.mark.parametrize(("source", "module", "is_package"), [
    ("from ..utils.repro import derive_seed", "repro_core.engine.run_folder", False),
    ("from . import distributed", "repro_core.engine.checkpoint", False),
    ("from .files import atomic_write", "repro_core.engine.checkpoint", False),
    ("from .repro import Stream", "repro_core.utils.data", False),
    ("from .utils import repro", "repro_core", True),
    ("def f():\n    import torch.distributed.checkpoint as dcp\n", "repro_core.engine.checkpoint", False),
    ("from __future__ import annotations\nimport os, json", "repro_core.engine.files", False),
])
def test_the_import_check_accepts_the_cores_own_kinds_of_import(source: str, module: str, is_package: bool) -> None:
    modules = set(core_modules(package_dir()))
    assert import_problems(source, module, is_package, modules) == []


@pytest.mark.parametrize("module", ["repro_core", "repro_core.engine.startup", "repro_core.engine.files"])
def test_importing_the_package_or_startup_imports_no_torch(module: str) -> None:
    """startup must run before torch loads: neither the package root nor it may pull torch in."""
    out = run_python(f"""
        import sys
        import {module}
        print(sorted(name for name in sys.modules if name == "torch" or name.startswith(("torch.", "numpy"))))
    """).stdout
    assert out.strip() == "[]"


def test_a_name_of_a_module_without_torch_loads_no_torch_through_the_package() -> None:
    """`from repro_core import restart_with_hash_seed` runs before torch is imported (the hash-seed
    restart then costs one bare interpreter start), so the package must load such a name from the
    module that defines it, not from one that re-exports it after importing torch. The control: a
    name of utils/repro.py does load torch, so the check can see it."""
    out = run_python("""
        import sys
        from repro_core import atomic_write, hash_seed_in_effect, restart_with_hash_seed, write_json
        print("torch" in sys.modules)
        from repro_core import seed_everything
        print("torch" in sys.modules)
    """).stdout
    assert out.split() == ["False", "True"]


def test_every_exported_name_loads_through_the_lazy_getattr() -> None:
    """Each name of __all__ is the object its module defines; the package lists it in dir()."""
    import importlib

    import repro_core

    assert repro_core.__all__, "nothing exported"
    for name in repro_core.__all__:
        value = getattr(repro_core, name)
        defining = importlib.import_module(value.__module__)
        assert value.__module__.startswith("repro_core."), name
        assert getattr(defining, name) is value, name
        assert value.__name__ == name
        assert name in dir(repro_core)


def test_an_unknown_name_of_the_package_raises_attribute_error() -> None:
    import repro_core

    with pytest.raises(AttributeError, match="no_such_name"):
        repro_core.no_such_name  # noqa: B018
    assert not hasattr(repro_core, "Config")
