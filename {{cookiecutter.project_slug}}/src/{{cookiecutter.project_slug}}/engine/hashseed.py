"""Fixing Python's string hashing for the training process. Standard library only, on purpose.

Python salts `hash()` of str and bytes with a random value chosen when the interpreter starts,
so iterating a set of strings gives another order in each process. The salt comes from the
PYTHONHASHSEED environment variable, read once, at start-up: the popular
`os.environ["PYTHONHASHSEED"] = "0"` inside a script changes nothing for that script.

The only way to fix it for this process is to start the interpreter again with the variable set.
`relaunch_with_hash_seed` does that, with os.execv: the same process id (so torchrun and job
schedulers keep tracking it), the same arguments, the variable added. It runs before torch is
imported, so the relaunch costs one bare interpreter start, not a
second import of torch.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

RELAUNCH_MARKER = "REPRO_RELAUNCHED_FOR_HASH_SEED"


def hash_seed_for(seed: int) -> str:
    """The PYTHONHASHSEED for a run: the run's seed itself (both range over 0 .. 2**32-1)."""
    return str(seed)


def hash_seed_in_effect() -> str:
    """What this interpreter's string hashing uses: a number, or 'random'."""
    if sys.flags.ignore_environment or not os.environ.get("PYTHONHASHSEED"):
        return "random"
    return os.environ["PYTHONHASHSEED"]


def flag_value(argv: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in argv, or None. A plain scan, not a parser:
    a flag with no value, or any other mistake, is left for train's own parser to report."""
    for position, arg in enumerate(argv):
        if arg == name and position + 1 < len(argv):
            return argv[position + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def seed_from_command_line(argv: list[str], default_seed: int) -> str:
    """The run's seed as text: --seed if typed; for --resume without it, the seed recorded in the
    run folder's config.json (as train will use); else the default."""
    typed = flag_value(argv, "--seed")
    if typed is not None:
        return typed
    if "--resume" in argv:
        out = flag_value(argv, "--out")
        folder = Path(out) if out else Path("runs") / f"seed{default_seed}"
        try:
            return str(json.loads((folder / "config.json").read_text(encoding="utf-8"))["seed"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # train reports a missing or broken run folder in its own words
    return str(default_seed)


def started_as_module(module: str) -> bool:
    """Whether this interpreter was started as `python [options] -m MODULE ...` (torchrun starts
    its processes so too)."""
    argv = getattr(sys, "orig_argv", [])
    position = 1
    while position < len(argv):
        arg = argv[position]
        if arg == "-m":
            return position + 1 < len(argv) and argv[position + 1] == module
        if arg.startswith("-m"):
            return arg[2:] == module
        if arg in ("-W", "-X"):  # options whose value is the next word
            position += 1
        elif not arg.startswith("-") or arg == "-c":
            return False
        position += 1
    return False


def relaunch_with_hash_seed(argv: list[str], default_seed: int) -> None:
    """Re-executes this interpreter with PYTHONHASHSEED derived from `--seed`, unless it is in effect.

    Returns when nothing needs doing. An invalid --seed is left for the real parser to report.
    Afterwards, until training installs its own handlers, Ctrl-C exits quietly (nothing to save yet).
    """
    signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(128 + signum))
    relaunched = os.environ.pop(RELAUNCH_MARKER, None)  # children (workers, subprocesses) start clean
    seed_text = seed_from_command_line(argv, default_seed)
    if not seed_text.isdigit() or int(seed_text) > 2**32 - 1:  # repro.MAX_SEED; no torch import here
        return
    wanted = hash_seed_for(int(seed_text))
    if hash_seed_in_effect() == wanted:
        return
    if sys.flags.ignore_environment or relaunched:
        # `python -E` ignores PYTHONHASHSEED; relaunching would loop. Carry on, recorded as 'random'.
        print(f"warning: cannot fix PYTHONHASHSEED={wanted} (python -E ignores it); string hashing stays random",
              file=sys.stderr)
        return
    os.environ["PYTHONHASHSEED"] = wanted
    os.environ[RELAUNCH_MARKER] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
