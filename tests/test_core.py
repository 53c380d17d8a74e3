"""The core (core/src/repro_core/) is the one source of the reproducibility machinery: each size of
the project holds its modules byte for byte, and the core installs alone, as an existing project
would install it. Its own unit tests are in core/tests/ and run without baking."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, bake, load

vendor = load("vendor_core", ROOT / "scripts" / "vendor_core.py")
imports = load("imports", ROOT / "scripts" / "imports.py")


def test_the_templates_copies_are_the_cores_modules_byte_for_byte():
    assert vendor.differing() == [], "run: python scripts/vendor_core.py (or nox -s regenerate)"


def test_the_core_holds_no_jinja_marker_that_a_bake_would_render():
    assert vendor.jinja_problems() == []


def test_the_check_names_a_copy_that_parted_from_the_core(tmp_path: Path):
    package = tmp_path / "package"
    for path in vendor.VENDORED:
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_bytes((vendor.CORE / path).read_bytes())
    assert vendor.differing(package=package) == []
    edited = package / "utils" / "repro.py"
    edited.write_bytes(edited.read_bytes().replace(b"random.seed(seed)", b"random.seed(seed + 1)"))
    (package / "engine" / "files.py").unlink()
    assert vendor.differing(package=package) == ["utils/repro.py", "engine/files.py"]


@pytest.mark.parametrize("scope", ["research", "teaching"])
def test_each_size_is_baked_with_the_cores_modules_byte_for_byte(tmp_path: Path, scope: str):
    project = bake(tmp_path, {"scope": scope, "init_git": False})
    package = project / "src" / project.name
    expected = vendor.VENDORED if scope == "research" else vendor.STUDENT_FILES
    assert vendor.differing(package=package) == ([] if scope == "research" else list(vendor.ENGINE_FILES))
    for path in expected:
        assert (package / path).read_bytes() == (vendor.CORE / path).read_bytes(), path
    if scope == "teaching":  # the teaching size has no engine at all
        assert not (package / "engine").exists()
    # One-way: no module of the core imports the project it is vendored into, and no two modules of
    # the package import each other, however late (a function's own import counts).
    found = imports.structure(package)
    assert found["imports_back_up_from_the_core"] == [] and found["circles"] == []


def test_the_import_scan_finds_a_circle_and_an_import_from_the_core_back_up_into_the_project(tmp_path: Path):
    """The negative control of the check above: a package made by hand with both faults."""
    package = tmp_path / "pkg"
    files = {"__init__.py": "", "config.py": "from .engine import files\n",
             "train.py": "def main():\n    from .engine.fingerprint import digest\n",
             "engine/__init__.py": "", "engine/fingerprint.py": "from ..train import main\n",
             "engine/files.py": "import json\nfrom ..config import Config\nfrom . import checkpoint\n",
             "engine/checkpoint.py": "from ..utils.repro import seed_everything\nfrom pkg import task\n",
             "utils/__init__.py": "", "utils/repro.py": "", "task.py": ""}
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    found = imports.structure(package)
    assert found["circles"] == [["config", "engine.files"], ["engine.fingerprint", "train"]]
    assert found["imports_back_up_from_the_core"] == ["engine.checkpoint -> task", "engine.files -> config"]


def test_the_core_installs_alone_from_its_folder_and_its_api_imports(tmp_path: Path):
    """`pip install ./core` as a user of an existing project types it (torch and numpy are theirs
    already, hence --no-deps), into a folder of its own: no editable link to this checkout."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(ROOT / "core")], check=True, capture_output=True, text=True)
    installed = target / "repro_core"
    assert (installed / "utils" / "data.py").read_bytes() == (vendor.CORE / "utils" / "data.py").read_bytes()
    check = ("import repro_core, sys; assert repro_core.__file__.startswith(sys.argv[1]), repro_core.__file__; "
             "print(repro_core.state_dict_sha256({}), repro_core.make_loader.__module__)")
    result = subprocess.run([sys.executable, "-c", check, str(target)], capture_output=True, text=True,
                            env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # sha256 of nothing
        "repro_core.utils.data"]
