#!/usr/bin/env bash
# Runs every test of the template: hooks, filters, and each named option combination baked,
# linted and its own test suite run. Usage: bash scripts/test.sh [pytest arguments]
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$ROOT"
"$PY" -m ruff check .
"$PY" -m pytest "$@"
