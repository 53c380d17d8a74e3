"""{{ cookiecutter.project_slug }}: a PyTorch training project whose runs repeat bit for bit.

Start reading at train.py; config.py holds every setting, utils/repro.py every reproducibility
knob, each explained. `python -m {{ cookiecutter.project_slug }}` lists the commands.
"""

import sys

from .utils.hashseed import relaunch_with_hash_seed, started_as_module

__version__ = "0.1.0"
DEFAULT_SEED = {{ cookiecutter.seed }}  # the default --seed and --data-seed (config.py), chosen at bake time

# `python -m {{ cookiecutter.project_slug }}.train` (torchrun too) imports this package before
# train.py, and so before torch: the cheapest moment to restart the interpreter with
# PYTHONHASHSEED set from --seed, which Python reads only at start-up (see utils/hashseed.py).
if started_as_module(f"{__name__}.train"):
    relaunch_with_hash_seed(sys.argv[1:], DEFAULT_SEED)
