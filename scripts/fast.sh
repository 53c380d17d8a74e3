#!/usr/bin/env bash
# A maintainer's quick loop (about eight minutes on two cores; the README gives the measured time):
# bake the defaults, lint them, run the generated project's plain pytest, then the template's tests
# that train nothing. The full suite, what CI runs, is scripts/test.sh.
# Usage: bash scripts/fast.sh [pytest arguments for the template]
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$ROOT"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo "baking the defaults into $scratch..." >&2
"$PY" -m cookiecutter --no-input "$ROOT" -o "$scratch" init_git=no >/dev/null
project=$(find "$scratch" -mindepth 1 -maxdepth 1 -type d)
"$PY" -m ruff check . "$project"
(cd "$project" && "$PY" -m pytest -q -p no:cacheprovider)
"$PY" -m pytest -m "not slow" "$@"
