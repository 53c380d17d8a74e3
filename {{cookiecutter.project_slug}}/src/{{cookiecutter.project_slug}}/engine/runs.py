"""Reading a run folder back (verify, compare, study, plot, the tests), and where two runs part.

Metrics are compared as the strings metrics.csv holds (repr of each float, which round-trips
exactly), so "equal" here means equal bit for bit.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .run_folder import ROW_FIELDS, SPLITS
from .world_sizes import FILE as WORLD_SIZES


class RunError(Exception):
    """A run folder that cannot be read; the message is one line for the user."""


@dataclass
class Run:
    path: Path
    config: dict
    environment: dict
    metrics: list[dict]  # metrics.csv's rows, each value as the string written
    metric_names: tuple[str, ...]  # metrics.csv's columns after epoch, step, split, lr: 'loss' and the task's
    summary: dict | None
    world_sizes: list[dict] = field(default_factory=list)  # world_sizes.json: [] unless the world size changed

    @property
    def weights(self) -> str | None:
        return self.summary["weights_sha256"] if self.summary else None

    @property
    def non_finite_step(self) -> int | None:
        """The first step whose training row holds a figure that is not finite (the run stopped
        there, or skipped it under --nonfinite skip); None if every figure is finite."""
        for row in self.metrics:
            if row["split"] == "train" and any(not math.isfinite(float(row[name])) for name in self.metric_names):
                return int(row["step"])
        return None

    @property
    def train_losses(self) -> list[str]:
        """Per-step training losses exactly as written (repr of the float), for bitwise comparison."""
        return [row["loss"] for row in self.metrics if row["split"] == "train"]


def read_json(path: Path, required: bool) -> dict | None:
    """A JSON object from a run folder; RunError (one line) if corrupt, or missing and required."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            raise RunError(f"{path.parent} holds no run ({path.name} is missing)") from None
        return None
    except IsADirectoryError:
        raise RunError(f"{path} is a folder, not a file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunError(f"{path} is corrupt ({error})") from None
    if not isinstance(data, dict):
        raise RunError(f"{path} is corrupt (not a JSON object)")
    return data


def read_metrics(path: Path) -> tuple[list[dict], tuple[str, ...]]:
    """metrics.csv's rows and its metric columns; RunError for anything that is not such a file."""
    try:
        with open(path, newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            header = tuple(reader.fieldnames or ())
            if header[:3] == ROW_FIELDS[:3] and "lr" not in header and "loss" in header:
                raise RunError(f"{path.parent} is a run of the teaching size's train.py (its {path.name} has no lr "
                               "column): this tool reads runs of the research train; two teaching runs are the same "
                               "when their summary.json's weights_sha256 are")
            if header[: len(ROW_FIELDS)] != ROW_FIELDS or "loss" not in header[len(ROW_FIELDS):]:
                raise RunError(f"{path} is corrupt (header {list(header)}, expected epoch, step, split, lr, loss, "
                               "...)")
            rows = list(reader)
    except FileNotFoundError:
        raise RunError(f"{path.parent} holds no run ({path.name} is missing)") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RunError(f"{path} is corrupt ({error})") from None
    names = header[len(ROW_FIELDS):]
    for number, row in enumerate(rows, start=2):
        try:
            int(row["epoch"]), int(row["step"])
            [float(row[name]) for name in names]
            if row["split"] == "train":
                float(row["lr"])
            elif row["lr"]:
                raise ValueError(row["lr"])
            if row["split"] not in SPLITS:
                raise ValueError(row["split"])
        except (TypeError, ValueError):
            raise RunError(f"{path} is corrupt (line {number} is not a metrics row)") from None
    return rows, names


def read_run(folder: Path) -> Run:
    """Reads config, environment, metrics, (if the run finished) summary and (if its world size
    changed) world_sizes.json; RunError otherwise."""
    if not folder.exists():
        raise RunError(f"{folder} does not exist")
    if not folder.is_dir():
        raise RunError(f"{folder} is not a folder")
    config = read_json(folder / "config.json", required=True)
    metrics, names = read_metrics(folder / "metrics.csv")
    history = (read_json(folder / WORLD_SIZES, required=False) or {}).get("world_sizes", [])
    if not (isinstance(history, list) and all(isinstance(entry, dict) and type(entry.get("step")) is int
                                              and type(entry.get("world_size")) is int for entry in history)):
        raise RunError(f"{folder / WORLD_SIZES} is corrupt (not a list of steps and world sizes)")
    summary = read_json(folder / "summary.json", required=False)
    if summary is not None and not isinstance(summary.get("weights_sha256"), str):
        raise RunError(f"{folder / 'summary.json'} is corrupt (no weights_sha256)")
    return Run(path=folder, config=config, metrics=metrics, metric_names=names,
               environment=read_json(folder / "environment.json", required=False) or {},
               summary=summary, world_sizes=history)


def first_divergence(a: Run, b: Run, rows: int | None = None) -> str | None:
    """Where two runs' metrics first differ, named by step, split and metric, with both values;
    only their first `rows` rows if given."""
    if a.metric_names != b.metric_names:
        return f"the runs record different metrics: {', '.join(a.metric_names)} vs {', '.join(b.metric_names)}"
    rows_a, rows_b = (a.metrics, b.metrics) if rows is None else (a.metrics[:rows], b.metrics[:rows])
    for row_a, row_b in zip(rows_a, rows_b, strict=False):  # lengths are compared after
        if (row_a["step"], row_a["split"]) != (row_b["step"], row_b["split"]):
            return (f"the logs part at step {row_a['step']} ({row_a['split']}) vs step {row_b['step']} "
                    f"({row_b['split']}): different evaluation schedules or lengths")
        for metric in a.metric_names:
            if row_a[metric] != row_b[metric]:
                return f"step {row_a['step']} ({row_a['split']}), {metric}: {row_a[metric]} vs {row_b[metric]}"
    if len(rows_a) != len(rows_b):
        return f"one log has {len(rows_a)} rows, the other {len(rows_b)}; the shorter one matches up to its end"
    return None
