"""A run that went on with another number of processes: world_sizes.json says from where.

    {"world_sizes": [{"step": 0, "world_size": 2},
                     {"step": 8, "epoch": 1, "epoch_step": 0, "world_size": 3}]}

A cluster hands back whatever is free, so `--resume` accepts another world size. The run goes on
from the same global step with the same samples (a step's samples are a function of seed, epoch
and step), but it is no longer the run that never stopped: the gradients add up in another order
and each rank draws its own dropout masks. So the run folder says where it changed: each entry
holds the checkpoint from which the run had that many processes (its step; its epoch and the
steps taken in it, which tell the checkpoint before an epoch's evaluation from the one after),
and config.json keeps the world size the run started with. A run that never changed has no
such file. verify re-runs the same history; compare reports it.
"""

from __future__ import annotations

from pathlib import Path

from .files import write_json

FILE = "world_sizes.json"  # read back by runs.read_run


def position(entry: dict) -> tuple[int, int]:
    """Where a checkpoint is in a run: later steps, and at one step the checkpoint after the
    epoch's evaluation (the next epoch) after the one before it."""
    return entry["step"], entry.get("epoch", 0)


def history_on_resume(history: list[dict], started_with: int, checkpoint: dict, world_size: int) -> list[dict]:
    """The history once the run resumes from `checkpoint` with `world_size` processes. What the
    run did after that checkpoint is done again, so entries from later on are dropped."""
    resumed_at = position(checkpoint)
    kept = [entry for entry in history if position(entry) < resumed_at] or [{"step": 0, "world_size": started_with}]
    if kept[-1]["world_size"] != world_size:
        kept.append({"step": checkpoint["step"], "epoch": checkpoint["epoch"], "epoch_step": checkpoint["epoch_step"],
                     "world_size": world_size})
    return kept if len(kept) > 1 else []


def write_world_sizes(folder: Path, history: list[dict]) -> None:
    """Records the history, or removes the record when the run is back to one world size."""
    if history:
        write_json(folder / FILE, {"world_sizes": history})
    else:
        (folder / FILE).unlink(missing_ok=True)


def describe(history: list[dict], world_size: int) -> str:
    """'2 processes' or '2 processes, then 3 from step 8 (after its epoch's evaluation)'."""
    if not history:
        return f"{world_size} process{'es' if world_size != 1 else ''}"
    parts = [f"{history[0]['world_size']} process{'es' if history[0]['world_size'] != 1 else ''}"]
    for entry in history[1:]:
        after = " (after its epoch's evaluation)" if entry["epoch_step"] == 0 else ""
        parts.append(f"then {entry['world_size']} from step {entry['step']}{after}")
    return ", ".join(parts)
