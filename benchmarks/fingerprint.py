"""This machine's fingerprint for the default bake: the record beside the portable table.

    python benchmarks/fingerprint.py [--json benchmarks/fingerprint.json]

Bakes the template with its defaults into a scratch folder and runs its
`python -m my_project.doctor --fingerprint FILE` there, as a user would: the digests of each
operation a run depends on, natively and under --cpu-kernels portable. On another machine, bake the
defaults and run `doctor --fingerprint mine.json --against <this repository>/benchmarks/fingerprint.json`:
it names the first operation where the two machines part.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "my_project"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "fingerprint.json",
                        help="where to write it (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", scratch, str(ROOT), "init_git=no"],
                       check=True, capture_output=True)
        project = Path(scratch) / PACKAGE
        env = {**os.environ, "PYTHONPATH": str(project / "src")}
        ended = subprocess.run([sys.executable, "-m", f"{PACKAGE}.doctor", "--fingerprint", str(args.json.resolve())],
                               cwd=project, env=env, text=True)
    return ended.returncode


if __name__ == "__main__":
    sys.exit(main())
