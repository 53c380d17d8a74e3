#!/usr/bin/env bash
# A maintainer's quick loop (under three minutes on two cores; the README gives the measured time):
# bake the defaults and lint them, then the template's tests that train nothing: the core's unit
# tests, the Lightning example's, the hooks, the READMEs' checks. A bake's own suite is
# `nox -s "combination(name='defaults')"`; the full suite, what CI runs, is scripts/test.sh.
# Usage: bash scripts/fast.sh [pytest arguments for the template]
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$ROOT"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo "baking the defaults into $scratch..." >&2
"$PY" -m cookiecutter --no-input "$ROOT" -o "$scratch" init_git=no >/dev/null
project=$(find "$scratch" -mindepth 1 -maxdepth 1 -type d)
"$PY" -m ruff check . "$project"
# Most of these tests wait on a process they start (a bake, a pip install, a fresh interpreter), one
# core each: one pytest-xdist worker per core keeps every core busy. Counted by nproc, the cores
# this process may use (its CPU affinity, a container's or a job's share), not `-n auto`, which
# with psutil counts the machine's physical cores. --dist loadfile gives each worker whole files,
# so that a module's fixtures are made once. On one core a worker only adds its start: none then.
# `-n 0` turns the workers off.
workers=$(nproc 2>/dev/null || echo auto)
[ "$workers" = 1 ] && workers=0
"$PY" -m pytest -m "not slow" -n "$workers" --dist loadfile "$@"
