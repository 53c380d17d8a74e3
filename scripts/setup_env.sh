# Sourced by the other scripts: makes .venv (once) with everything in requirements-dev.txt.
# Needs only Python 3.10+ on PATH (python3, or $PYTHON).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-dev.txt"; then
  echo "error: could not install requirements-dev.txt into $VENV" >&2
  exit 1
fi
PY="$VENV/bin/python"
