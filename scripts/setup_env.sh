# Sourced by the other scripts: makes .venv (once) with everything in requirements-dev.txt.
# Needs only Python 3.10+ on PATH (python3, or $PYTHON). Says what it is doing before each slow
# step, so that a first run's long install is not a silent wait.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
# A copy of the requirements that .venv was last installed from: when it still matches, pip is
# skipped (asking pip to confirm dozens of packages costs seconds on every run).
STAMP="$VENV/.requirements-dev.txt"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setting up $VENV (first run: installs torch and the test tools; the download takes a while)..." >&2
  "${PYTHON:-python3}" -m venv "$VENV"
fi
if ! cmp -s "$ROOT/requirements-dev.txt" "$STAMP"; then
  echo "installing requirements-dev.txt into $VENV..." >&2
  if ! "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-dev.txt"; then
    echo "error: could not install requirements-dev.txt into $VENV" >&2
    exit 1
  fi
  # The core (core/), editable: its tests and the examples import it as a user's project would.
  if ! "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$ROOT/core"; then
    echo "error: could not install core/ into $VENV" >&2
    exit 1
  fi
  cp "$ROOT/requirements-dev.txt" "$STAMP"
fi
PY="$VENV/bin/python"
