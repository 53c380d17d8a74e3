"""Specifications of the package's shape: importing any of its modules changes nothing global.

Settings that live in the process (the umask, torch's determinism flags and thread count, the
random generators, signal handlers, environment variables) change only where a command starts:
in its main(). A module that changed them on import would change every program that imports it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import PACKAGE, SRC, python_env

SNAPSHOT = """
def snapshot():
    import os, random, signal, sys
    import numpy, torch
    umask = os.umask(0o022)
    os.umask(umask)
    return (dict(os.environ), umask, torch.are_deterministic_algorithms_enabled(), torch.get_num_threads(),
            torch.backends.cudnn.benchmark, random.getstate(), str(numpy.random.get_state()),
            torch.get_rng_state().tolist(), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
"""


def test_importing_every_module_of_the_package_changes_no_global_state():
    modules = sorted(".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
                     for path in (SRC / PACKAGE).rglob("*.py"))
    code = SNAPSHOT + f"""
import importlib
before = snapshot()
for name in {modules!r}:
    importlib.import_module(name)
after = snapshot()
print(len({modules!r}), [i for i, (a, b) in enumerate(zip(before, after)) if a != b])
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=python_env())
    assert result.returncode == 0, result.stderr[-3000:]
    count, changed = result.stdout.split(" ", 1)
    assert int(count) == len(modules) > 5 and changed.strip() == "[]", result.stdout


def test_utils_can_be_copied_into_another_project_alone(tmp_path):
    """utils/ imports nothing of this package outside it: copied on its own, every module imports
    (in a fresh interpreter that cannot see src/) and the three knobs a project calls first work."""
    shutil.copytree(SRC / PACKAGE / "utils", tmp_path / "elsewhere" / "utils")
    code = ("import utils.data, utils.device, utils.repro\n"
            "utils.repro.configure_determinism('strict'); utils.repro.seed_everything(1)\n"
            "print(utils.device.select_device('cpu'))")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path / "elsewhere",
                            env=env)
    assert result.returncode == 0 and result.stdout.strip() == "cpu", result.stderr[-3000:]


def test_a_task_py_may_import_config_for_its_type_hints_in_either_size(tmp_path):
    """A task.py written for the research size annotates `config: Config`, imported from the
    package's config.py; the teaching size's config.py has that name too, so the same task.py
    imports in both (the package copied, the line added to its task.py, in a fresh interpreter)."""
    package = shutil.copytree(SRC / PACKAGE, tmp_path / PACKAGE)
    task = package / "task.py"
    task.write_text(task.read_text(encoding="utf-8") + "\nfrom .config import Config  # for type hints\n",
                    encoding="utf-8")
    code = f"import {PACKAGE}.config, {PACKAGE}.task\nprint({PACKAGE}.task.Config is {PACKAGE}.config.Config)"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env={**env, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr[-3000:]
