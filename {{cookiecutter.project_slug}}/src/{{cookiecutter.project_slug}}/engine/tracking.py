"""Offline experiment tracking: every metrics row also goes to the trackers listed here.

A tracker is a function that takes one metrics row, a dict with epoch, step, split ("train" or
"val"), loss and each metric the task names, after metrics.csv has it. Only rank 0 has trackers.
This module makes the built-in one (--tensorboard); a project adds its own (W&B, MLflow, ...)
without editing it: the generated project's task.py may define `trackers(config, out)`, which
returns such functions (its docs/studies.md shows both).

A tracker only reads the row: it must never draw random numbers or touch the model, so that
tracking on and off give the same weights (tests/test_tracking.py proves it for TensorBoard).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from .run_folder import ROW_FIELDS

Tracker = Callable[[dict], None]


def tracking_problem(config) -> str | None:
    if config.tensorboard and importlib.util.find_spec("tensorboard") is None:
        return ("--tensorboard needs the tensorboard package: python -m pip install tensorboard "
                "(or the project's extra: python -m pip install -e '.[tensorboard]')")
    return None


def make_trackers(config, out: Path, is_main: bool) -> list[Tracker]:
    """The trackers of this run: none on other ranks than 0, and none unless asked for."""
    if not is_main or not config.tensorboard:
        return []
    from torch.utils.tensorboard import SummaryWriter  # imported only when asked for: it is slow

    writer = SummaryWriter(log_dir=str(out / "tensorboard"))

    def to_tensorboard(row: dict) -> None:
        for name, value in row.items():
            if name not in ROW_FIELDS:
                writer.add_scalar(f"{row['split']}/{name}", value, row["step"])
        writer.flush()  # a killed run keeps every event written so far

    return [to_tensorboard]
