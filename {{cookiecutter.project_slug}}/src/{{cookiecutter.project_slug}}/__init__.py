"""{{ cookiecutter.project_slug }}: a PyTorch training project whose runs repeat bit for bit.

Start reading at train.py; utils/repro.py holds every reproducibility setting, each explained.
"""

__version__ = "0.1.0"
