"""The string hash seed, which Python reads once, as the interpreter starts, and the one restart that
sets such variables. Standard library only, on purpose: a program calls `restart_with_hash_seed`
before it imports torch (the teaching size's package does, from its __init__.py), so the restart
costs one bare interpreter start, not a second import of torch. The research size's relaunch
(engine/startup.py: the hash seed and the CPU kernel pins) restarts through `restart_with` too.
repro.py, which imports torch, offers both hash-seed functions too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MAX_SEED = 2**32 - 1  # PYTHONHASHSEED's range, and NumPy's legacy global generator's
RESTARTED = "REPRO_RESTARTED_FOR_HASH_SEED"  # set across the one restart: a second is never tried


def initial_environment() -> dict[str, str] | None:
    """The environment this process started with (Linux keeps it in /proc), before any change to
    os.environ; None where unknown."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def hash_seed_in_effect() -> str:
    """What this interpreter's string hashing uses: the PYTHONHASHSEED it started with, or 'random'.

    Read from the environment the process started with, which Linux keeps in /proc/self/environ:
    a value put into os.environ since then is not in effect. Elsewhere, what os.environ says.
    """
    if sys.flags.ignore_environment:
        return "random"
    started_with = initial_environment()
    return (os.environ if started_with is None else started_with).get("PYTHONHASHSEED", "") or "random"


def missing_from_environment(wanted: dict[str, str]) -> dict[str, str]:
    """The wanted variables not in effect in this interpreter: those it did not start with, and
    PYTHONHASHSEED unless its string hashing uses it (under `python -E` it never does)."""
    started_with = initial_environment()  # {} is known (`env -i`), None unknown: then os.environ
    in_effect = {**(os.environ if started_with is None else started_with), "PYTHONHASHSEED": hash_seed_in_effect()}
    return {name: value for name, value in wanted.items() if in_effect.get(name) != value}


def restart_with(missing: dict[str, str]) -> None:
    """Starts this interpreter again, with the same arguments and the `missing` variables (see
    missing_from_environment) added to its environment: the one restart of both sizes. Returns at
    once when nothing is missing, and warns instead of looping where a restart cannot help: under
    `python -E`, which ignores PYTHONHASHSEED, and in the restarted process itself, should something
    (a wrapper script, say) have dropped the variables on the way. `os.execv` keeps the process id,
    so torchrun and job schedulers still track the process.
    """
    missing, restarted = dict(missing), os.environ.pop(RESTARTED, None)  # the restart's children start clean
    if "PYTHONHASHSEED" in missing and sys.flags.ignore_environment:  # restarting would loop
        print(f"warning: python -E ignores PYTHONHASHSEED, so string hashing stays random "
              f"(wanted {missing.pop('PYTHONHASHSEED')})", file=sys.stderr)
    if not missing:
        return
    if restarted:  # set, and still not in effect: something removes them; never loop
        print(f"warning: cannot set {', '.join(f'{name}={value}' for name, value in missing.items())} "
              "for this process", file=sys.stderr)
        return
    os.environ.update(missing)
    os.environ[RESTARTED] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def restart_with_hash_seed(seed: int) -> None:
    """Starts this interpreter again, with the same arguments and PYTHONHASHSEED set to the seed,
    unless it already runs with it. Call it first thing when the script runs as a program (under
    `if __name__ == "__main__":`, or before torch's import as the teaching size does), never on a
    plain import: it would restart whatever imported it.

    Guards against: Python salting `hash()` of str and bytes with a value chosen at start-up, so
    that a set of strings (and whatever is built from one: a vocabulary, say) iterates in another
    order in every process. Costs: a second start of the interpreter on the first launch (and of
    whatever it had imported by then: call it before torch).
    """
    if isinstance(seed, bool) or not hasattr(seed, "__index__") or not 0 <= int(seed) <= MAX_SEED:
        raise ValueError(f"seed must be an integer in 0 .. {MAX_SEED}, not {seed!r}")
    restart_with(missing_from_environment({"PYTHONHASHSEED": str(int(seed))}))
