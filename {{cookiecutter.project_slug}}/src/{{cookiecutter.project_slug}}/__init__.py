{%- if cookiecutter.scope == "teaching" -%}
"""{{ cookiecutter.project_slug }}: a PyTorch training project whose runs repeat bit for bit.

    task.py      yours: the data, the model, the loss and the metrics
    train.py     the training recipe: read it top to bottom (python -m {{ cookiecutter.project_slug }}.train)
    config.py    its settings: every flag, its default and its check
    utils/       what any project could copy: the reproducibility settings, the device, the seeded loader
"""

import json
import sys
from pathlib import Path

from .utils.hashseed import MAX_SEED, restart_with_hash_seed  # no torch: neither it nor utils/__init__.py imports it

DEFAULT_SEED = {{ cookiecutter.seed|int }}  # the default --seed and --data-seed, chosen at bake time


def seed_from_command_line(argv: list[str]) -> int | None:
    """The seed train.py will run with, read without torch or argparse: the last --seed, as train's
    parser takes it (it takes no abbreviation); with --resume, the one the run folder recorded.
    None for a value train.py refuses (it says why, in its own words)."""
    flags = {}
    for position, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if name in ("--seed", "--out"):
            flags[name] = value if equals else (argv[position + 1] if position + 1 < len(argv) else "")
    seed = flags.get("--seed", str(DEFAULT_SEED))
    if "--resume" in argv:
        try:
            folder = Path(flags.get("--out") or f"runs/seed{seed}")
            seed = str(json.loads((folder / "config.json").read_text(encoding="utf-8"))["seed"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no run to continue there: train.py refuses
    return int(seed) if seed.isascii() and seed.isdigit() and int(seed) <= MAX_SEED else None


# Python reads PYTHONHASHSEED only as the interpreter starts, so the train command starts it again,
# once, with the variable set from the seed. Here, because `python -m <package>.train` imports this
# package before train.py, and so before torch: the restart costs a bare interpreter's start, not
# a second import of torch. sys.argv[0] is "-m" only while `python -m` looks for its module: a
# plain `import` never restarts.
if sys.argv[0] == "-m" and {f"{__name__}.train", f"-m{__name__}.train"} & set(sys.orig_argv):
    if (seed := seed_from_command_line(sys.argv[1:])) is not None:
        restart_with_hash_seed(seed)
{%- else -%}
"""{{ cookiecutter.project_slug }}: a PyTorch training project whose runs repeat bit for bit.

    task.py      yours: the data, the model, the loss and the metrics
    config.py    every setting of a run (add yours here)
    train.py     the recipe: read it top to bottom (python -m {{ cookiecutter.project_slug }}.train)
    verify.py, compare.py, evaluate.py, doctor.py, study.py, plot.py
                 the other commands (python -m {{ cookiecutter.project_slug }}.<command>)
    operations.py
                 the recipe's own digests for doctor --fingerprint (not a command)
    engine/      the machinery that keeps any task's runs repeatable; you should not need to edit it

`python -m {{ cookiecutter.project_slug }}` lists the commands.
"""

import sys

from .engine.startup import relaunch_with_run_environment, started_as_module

__version__ = "0.1.0"
DEFAULT_SEED = {{ cookiecutter.seed|int }}  # the default --seed and --data-seed (config.py), chosen at bake time

# The one thing this file does besides naming things, and only when the interpreter was started as
# the train command (`python -m {{ cookiecutter.project_slug }}.train`, torchrun too; never on a plain
# `import`): Python imports this package before train.py, and so before torch, which makes this the
# cheapest moment to restart the interpreter with PYTHONHASHSEED set from --seed, and the CPU kernel
# pins of --cpu-kernels portable. Python and torch read these variables only at start-up (see
# engine/startup.py).
if started_as_module(f"{__name__}.train"):
    relaunch_with_run_environment(sys.argv[1:], DEFAULT_SEED, f"python -m {__name__}.train")
{%- endif %}
