{%- if cookiecutter.scope == "teaching" -%}
"""{{ cookiecutter.project_slug }}: a PyTorch training project whose runs repeat bit for bit.

    task.py      yours: the data, the model, the loss and the metrics
    train.py     the training program: read it top to bottom (python -m {{ cookiecutter.project_slug }}.train)
    utils/       what any project could copy: the reproducibility settings, the device, the seeded loader
"""

DEFAULT_SEED = {{ cookiecutter.seed|int }}  # the default --seed and --data-seed, chosen at bake time
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
