"""The string hash seed, which Python reads once, as the interpreter starts. Standard library only,
on purpose: a program calls `restart_with_hash_seed` before it imports torch (the teaching size's
package does, from its __init__.py), so the restart costs one bare interpreter start, not a
second import of torch. repro.py, which imports torch, offers both functions too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MAX_SEED = 2**32 - 1  # PYTHONHASHSEED's range, and NumPy's legacy global generator's
RESTARTED = "REPRO_RESTARTED_FOR_HASH_SEED"  # set across the one restart: a second is never tried


def hash_seed_in_effect() -> str:
    """What this interpreter's string hashing uses: the PYTHONHASHSEED it started with, or 'random'.

    Read from the environment the process started with, which Linux keeps in /proc/self/environ:
    a value put into os.environ since then is not in effect. Elsewhere, what os.environ says.
    """
    if sys.flags.ignore_environment:
        return "random"
    try:
        started = Path("/proc/self/environ").read_bytes().split(b"\0")
        value = next((item.split(b"=", 1)[1].decode() for item in started if item.startswith(b"PYTHONHASHSEED=")), "")
    except OSError:
        value = os.environ.get("PYTHONHASHSEED", "")
    return value or "random"


def restart_with_hash_seed(seed: int) -> None:
    """Starts this interpreter again, with the same arguments and PYTHONHASHSEED set to the seed,
    unless it already runs with it. Call it first thing when the script runs as a program (under
    `if __name__ == "__main__":`, or before torch's import as the teaching size does), never on a
    plain import: it would restart whatever imported it.

    Guards against: Python salting `hash()` of str and bytes with a value chosen at start-up, so
    that a set of strings (and whatever is built from one: a vocabulary, say) iterates in another
    order in every process. Costs: a second start of the interpreter on the first launch (and of
    whatever it had imported by then: call it before torch). `os.execv` keeps the process id, so a
    job scheduler still tracks the process.
    """
    if isinstance(seed, bool) or not hasattr(seed, "__index__") or not 0 <= int(seed) <= MAX_SEED:
        raise ValueError(f"seed must be an integer in 0 .. {MAX_SEED}, not {seed!r}")
    wanted, restarted = str(int(seed)), os.environ.pop(RESTARTED, None)  # children start clean
    if hash_seed_in_effect() == wanted:
        return
    if sys.flags.ignore_environment:  # `python -E` ignores the variable: restarting would loop
        print(f"warning: python -E ignores PYTHONHASHSEED, so string hashing stays random (wanted {wanted})",
              file=sys.stderr)
        return
    if restarted:  # set, and still not in effect: something removes it; never loop
        print(f"warning: cannot set PYTHONHASHSEED={wanted} for this process", file=sys.stderr)
        return
    os.environ["PYTHONHASHSEED"] = wanted
    os.environ[RESTARTED] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
