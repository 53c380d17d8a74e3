"""How far a run resumed with another world size ends from the run that never changed.

    python benchmarks/resume_gap.py [--stop-at 80] [--json benchmarks/results-parallel.json]

Bakes the template with its defaults and, for --parallel ddp and fsdp, trains on the CPU (gloo)
with the example's 5 epochs, a global batch of 48 and 1584 training samples (33 steps an epoch,
shared equally by 1, 2 and 3 processes):

  reference  2 processes, never stopped
  to1, to3   the same run stopped after step --stop-at by 2 processes, resumed with 1 and with 3
  to2        the same, resumed with 2 (the control: bit for bit the reference)
  seed       (ddp only) the reference with --seed 43: how far two seeds end apart, for scale

and reports, against the reference, the largest absolute difference of any weight (max |dw|,
over every tensor of model.pt), the final validation figures, and the mean training loss of each
epoch: the loss curves side by side.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from memory import PACKAGE, bake, machine, merge_into  # benchmarks/memory.py, beside this file

FLAGS = ("--device", "cpu", "--batch-size", "48", "--max-samples", "1584", "--checkpoint-every", "20")


def launch(project: Path, world_size: int | None, *args: str) -> None:
    """`python -m <package>.train ARGS`, under torchrun with `world_size` processes unless None."""
    runner = [sys.executable] if world_size is None else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}"]
    result = subprocess.run([*runner, "-m", f"{PACKAGE}.train", *args], cwd=project, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(project / "src")})
    if result.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{result.stderr[-3000:]}")


def train_runs(project: Path, parallel: str, stop_at: int) -> dict[str, Path]:
    runs = project / "runs"
    options = (*FLAGS, "--parallel", parallel)
    launch(project, 2, *options, "--out", str(runs / f"{parallel}_reference"))
    launch(project, 2, *options, "--out", str(runs / f"{parallel}_stopped"), "--stop-after-steps", str(stop_at))
    folders = {"reference": runs / f"{parallel}_reference"}
    for size in (1, 2, 3):
        folders[f"to{size}"] = shutil.copytree(runs / f"{parallel}_stopped", runs / f"{parallel}_to{size}")
        plain = size == 1 and parallel == "ddp"  # one DDP process needs no torchrun; FSDP always does
        launch(project, None if plain else size, "--out", str(folders[f"to{size}"]), "--resume")
    if parallel == "ddp":
        folders["seed"] = runs / "ddp_seed43"
        launch(project, 2, *options, "--seed", "43", "--out", str(folders["seed"]))
    return folders


def epoch_losses(folder: Path) -> list[float]:
    """The mean training loss of each epoch, from metrics.csv."""
    with open(folder / "metrics.csv", newline="", encoding="utf-8") as file:
        rows = [row for row in csv.DictReader(file) if row["split"] == "train"]
    epochs = sorted({int(row["epoch"]) for row in rows})
    return [sum(float(r["loss"]) for r in rows if int(r["epoch"]) == e) / sum(int(r["epoch"]) == e for r in rows)
            for e in epochs]


def gap(folder: Path, reference: Path) -> dict:
    weights = torch.load(folder / "model.pt", weights_only=True)
    baseline = torch.load(reference / "model.pt", weights_only=True)
    floats = [name for name, value in baseline.items() if value.is_floating_point()]
    summary = json.loads((folder / "summary.json").read_text())
    return {"max_abs_dw": max(float((weights[n] - baseline[n]).abs().max()) for n in floats),
            "max_abs_w": max(float(baseline[n].abs().max()) for n in floats),
            "val_loss": summary["val_loss"], "val_accuracy": summary["val_accuracy"],
            "epoch_train_loss": epoch_losses(folder),
            "world_sizes": json.loads((folder / "world_sizes.json").read_text())["world_sizes"]
            if (folder / "world_sizes.json").exists() else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop-at", type=int, default=80, help="the step after which the world size changes")
    parser.add_argument("--json", type=Path, default=None, help="merge the results into this file")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="resume-gap-") as scratch:
        project = bake(Path(scratch))
        for parallel in ("ddp", "fsdp"):
            folders = train_runs(project, parallel, args.stop_at)
            results[parallel] = {name: gap(folder, folders["reference"]) for name, folder in folders.items()}
    print(f"{'':16s}{'max |dw|':>12s}{'val_loss':>10s}{'val_acc':>9s}  mean train loss per epoch")
    for parallel, rows in results.items():
        for name, row in rows.items():
            print(f"{parallel + ' ' + name:16s}{row['max_abs_dw']:>12.3g}{row['val_loss']:>10.4f}"
                  f"{row['val_accuracy']:>9.4f}  " + " ".join(f"{loss:.4f}" for loss in row["epoch_train_loss"]))
    if args.json:
        merge_into(args.json, {"resume_gap": {"stop_at": args.stop_at, "flags": list(FLAGS), "runs": results,
                                              "machine": machine(sys.argv[1:])}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
