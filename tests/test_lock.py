"""The generated project's lock: its README's `uv pip compile` command makes a lock with hashes from
the default bake's pyproject.toml, and a fresh virtual environment installs that lock offline, from
a wheel folder, hash-checked, and runs the project's own tests.

What this proves: the shipped command makes a complete lock (every package pinned, every pin with
its hashes, torch's CPU build among them), and the lock alone rebuilds a working stack with no
index at all (pip's configuration is switched off for the install: only the wheel folder is seen).

What it cannot prove here: this machine reaches the package index (PyPI) but not the PyTorch index
that the README's `--torch-backend cpu` reads. So the test gives uv the same CPU build of torch
from pip's own find-links folder (`--find-links DIR --override torch==VERSION`, the version
installed here) in place of `--torch-backend cpu`, and says so when it cannot find one.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cookiecutter_cli, docs_page

pytestmark = pytest.mark.slow  # a few minutes: a resolution, a download and a fresh venv with torch
LOCK_COMMAND = re.compile(r"^uv pip compile .*$", re.MULTILINE)
TIMEOUT = 1200


def uv() -> list[str] | None:
    """How to run uv here: the Python package (requirements-dev.txt lists it), or one on PATH."""
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    found = shutil.which("uv")
    return [found] if found else None


def pip_find_links() -> list[Path]:
    """The folders pip's configuration (files and PIP_* variables) adds with find-links."""
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    values = re.findall(r"find-links='([^']*)'", listing) + [os.environ.get("PIP_FIND_LINKS", "")]
    return [Path(folder) for value in values for folder in value.split() if Path(folder).is_dir()]


def local_torch_wheel() -> Path | None:
    """This Python's wheel of the installed torch build, if one lies in a find-links folder."""
    version = importlib.metadata.version("torch")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return next((wheel for folder in pip_find_links() for wheel in sorted(folder.glob(f"torch-{version}-{tag}-*.whl"))),
                None)


def run(command: list[str], **options) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, **options)
    assert result.returncode == 0, f"{shlex.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def normal(name: str) -> str:
    """A distribution name (or name==version) as the package index compares names."""
    return re.sub(r"[-_.]+", "-", name.split("==")[0]).lower() + ("==" + name.split("==")[1] if "==" in name else "")


def pins(lock: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock, re.MULTILINE))


def test_the_readme_lock_command_makes_a_hashed_lock_that_installs_offline_into_a_fresh_venv(tmp_path):
    [command] = LOCK_COMMAND.findall(docs_page("locking").read_text(encoding="utf-8"))
    uv_run, wheel = uv(), local_torch_wheel()
    if uv_run is None:
        pytest.skip("uv is not installed here (requirements-dev.txt lists it; scripts/setup_env.sh installs it)")
    if wheel is None:
        pytest.skip("the PyTorch index is out of reach here and no torch CPU wheel for this Python lies in pip's "
                    "find-links folders, so the lock cannot get torch's CPU build")
    assert cookiecutter_cli(tmp_path, "init_git=no").returncode == 0
    project = tmp_path / "my_project"
    words = shlex.split(command)
    assert words[:3] == ["uv", "pip", "compile"] and "--generate-hashes" in words and "--torch-backend" in words
    at = words.index("--torch-backend")
    override = tmp_path / "torch-build.txt"
    override.write_text(f"torch=={importlib.metadata.version('torch')}\n")
    words[at:at + 2] = ["--find-links", str(wheel.parent), "--override", str(override)]
    run([*uv_run, *words[1:]], cwd=project, env={**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")})

    lock = (project / "requirements.lock").read_text()
    pinned = pins(lock)
    assert pinned["torch"] == importlib.metadata.version("torch") and {"numpy", "pytest", "ruff"} <= pinned.keys()
    entries = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", lock.split("\n", 2)[2])
    assert all("--hash=sha256:" in entry for entry in entries if "==" in entry), "a pin without its hash"

    wheels = tmp_path / "wheels"  # the wheel cache: what pip downloads for this platform, checked by hash
    run([sys.executable, "-m", "pip", "download", "--require-hashes", "-r", str(project / "requirements.lock"),
         "-d", str(wheels)])
    venv = tmp_path / "fresh-venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    offline = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    offline = {key: value for key, value in offline.items() if key not in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL",
                                                                           "PIP_INDEX_URL", "PYTHONPATH")}
    run([python, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), "--require-hashes",
         "-r", str(project / "requirements.lock")], env=offline)
    run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation", "-e", str(project)],
        env=offline)
    run([python, "-m", "pip", "check"], env=offline)
    frozen = run([python, "-m", "pip", "freeze", "--exclude-editable"], env=offline).stdout.split()
    installed = {normal(name): version for name, version in (line.split("==", 1) for line in frozen)}
    locked = set(re.findall(r"^([A-Za-z0-9_.-]+==\S+)", lock, re.MULTILINE))
    assert {f"{name}=={version}" for name, version in installed.items()} <= {normal(pin) for pin in locked}
    assert installed["torch"] == pinned["torch"]
    run([python, "-m", "ruff", "check", "."], cwd=project, env=offline)
    run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_config.py"], cwd=project, env=offline)
