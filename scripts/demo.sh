#!/usr/bin/env bash
# The main job: bake the template with its defaults into a scratch folder, train twice with one
# seed in two fresh processes, print both weight hashes and whether they match (exit 1 if not).
# Each slow step is announced on stderr first; the results go to stdout.
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
SCRATCH="$(mktemp -d)"
echo "baking the template with its defaults into $SCRATCH..." >&2
"$PY" -m cookiecutter --no-input --output-dir "$SCRATCH" "$ROOT" >/dev/null
cd "$SCRATCH/my_project"
echo "installing my_project into $VENV (editable, no downloads)..." >&2
"$PY" -m pip install -q --no-deps --no-build-isolation -e .
for run in a b; do
  echo "training run $run: python -m my_project.train --seed 42 --out runs/$run..." >&2
  "$PY" -m my_project.train --seed 42 --out "runs/$run" | tail -n 1
done
"$PY" - <<'PYTHON'
import json, sys
a, b = (json.load(open(f"runs/{r}/summary.json"))["weights_sha256"] for r in "ab")
print(f"run a: {a}\nrun b: {b}")
print("MATCH: identical weights, bit for bit" if a == b else "DIFFER: the weights are not identical")
sys.exit(a != b)
PYTHON
echo "project and runs left in $SCRATCH/my_project"
