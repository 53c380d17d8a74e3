"""What --parallel ddp and --parallel fsdp hold in memory per process, and what a step costs.

    python benchmarks/memory.py [--width 64] [--steps 30] [--json benchmarks/results-parallel.json]

Bakes the template with its defaults into a scratch folder, then for ddp and fsdp at 1, 2 and 4
processes launches `torchrun --standalone` (gloo, on the CPU) with a small script that trains
the baked package's own model the way train.py does: task.make_model, prepare_for_training
(DistributedDataParallel, or FSDP2's fully_shard per block), make_optimizer with AdamW (two state
tensors per parameter) and the project's train_step. Each rank reports, as the optimizer is
about to step (gradients complete, weights sharded again):

  parameter_bytes  the weights this rank holds (under FSDP its shards: DTensor.to_local())
  gradient_bytes   the gradients the optimizer sees on this rank
  optimizer_bytes  AdamW's state on this rank (exp_avg, exp_avg_sq, step)

and the median time of a step after the first 3 (the median of --repeats runs, alternating
ddp and fsdp). The largest figure over the ranks is kept (FSDP
pads a tensor whose first dimension the ranks cannot share equally). DDP's gradient buckets (a
second copy of the gradients, for the all-reduce) and the gathered weights FSDP holds for the
block it is computing are not counted: they are working memory, not state.

fsdp_vs_ddp_step_time is FSDP's median step time over DDP's at each world size (above 1: FSDP is
slower). At 4 processes on a 2-core machine the processes share cores: read the step times of
that row as an oversubscribed machine's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "my_project"
WORLD_SIZES = (1, 2, 4)
BATCH = 48  # a global batch that 1, 2 and 4 processes share equally

# Runs under torchrun, in the baked project: one line of JSON per rank on stdout.
MEASURE = """
import json, os, statistics, sys, time
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from {package} import task
from {package}.config import Config
from {package}.engine import distributed
from {package}.engine.checkpoint import TrainingState
from {package}.engine.loop import accumulation_windows
from {package}.engine.optim import make_optimizer
from {package}.engine.precision import make_scaler
from {package}.utils.repro import seed_everything
from {package}.train import first, make_loaders, prepare_for_training, train_step

parallel, width, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cpu = torch.device("cpu")
config = Config(parallel=parallel, width=width, optimizer="adamw", batch_size={batch}, device="cpu",
                world_size=int(os.environ["WORLD_SIZE"]))
torch.set_num_threads(1)
distributed.join(cpu)
seed_everything(config.seed)
train_set, val_set = task.make_datasets(config)
model = task.make_model(config, train_set)
train_loader, _ = make_loaders(first(train_set, {batch} * (steps + 3)), first(val_set, {batch}), config)
trained = prepare_for_training(model, config, cpu)  # DDP, or FSDP's shards, as train.py does
optimizer, scheduler = make_optimizer(model, config, steps=10 * steps)


def held_bytes(tensor):
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


seen = {{}}


def measure(optimizer, args, kwargs):  # as the optimizer steps: gradients complete, weights sharded
    seen["parameter_bytes"] = sum(held_bytes(p) for p in model.parameters())
    seen["gradient_bytes"] = sum(held_bytes(p.grad) for p in model.parameters() if p.grad is not None)


optimizer.register_step_pre_hook(measure)
state = TrainingState(model, optimizer, scheduler, make_scaler("fp32", cpu))
times, last = [], time.perf_counter()
trained.train()
train_loader.sampler.set_epoch(0)
for micro_batches in accumulation_windows(train_loader, config.accumulate):
    train_step(trained, micro_batches, state, config, cpu)
    now = time.perf_counter()
    times.append(now - last)
    last = now
seen["optimizer_bytes"] = sum(held_bytes(value) for values in optimizer.state.values()
                              for value in values.values() if isinstance(value, torch.Tensor))
seen["step_ms"] = 1000 * statistics.median(times[3:])
seen["parameters"] = sum(p.numel() for p in model.parameters())
everything = [None] * dist.get_world_size()
dist.all_gather_object(everything, seen)
if dist.get_rank() == 0:
    print(json.dumps(everything))
distributed.leave()
"""


def bake(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(folder), str(ROOT)],
                   check=True, capture_output=True)
    return folder / PACKAGE


def measure(project: Path, parallel: str, world_size: int, width: int, steps: int) -> dict:
    """Launches the measuring script under torchrun; the largest figure of each kind over the ranks."""
    script = project / "measure_memory.py"
    script.write_text(MEASURE.format(package=PACKAGE, batch=BATCH))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
               str(script), parallel, str(width), str(steps)]
    for attempt in (1, 2):  # once, on this shared machine, a process aborted as it exited: one more try
        result = subprocess.run(command, cwd=project, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(project / "src")})
        if result.returncode == 0:
            break
        print(f"{parallel} x{world_size} failed (attempt {attempt}): {result.stderr.strip().splitlines()[:1]}")
    else:
        raise RuntimeError(f"{parallel} x{world_size} failed:\n{result.stderr[-3000:]}")
    ranks = json.loads(result.stdout.strip().splitlines()[-1])
    figures = {key: max(rank[key] for rank in ranks) for key in ranks[0]}
    figures["total_bytes"] = figures["parameter_bytes"] + figures["gradient_bytes"] + figures["optimizer_bytes"]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=64, help="the example model's --width (default: 64)")
    parser.add_argument("--steps", type=int, default=30, help="steps timed per run (default: 30)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, alternating; the median (default: 3)")
    parser.add_argument("--json", type=Path, default=None, help="merge the results into this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memory-") as scratch:
        project = bake(Path(scratch))
        table = {parallel: {} for parallel in ("ddp", "fsdp")}
        for _ in range(args.repeats):  # alternate the contenders, so drift in the machine hits all alike
            for size in WORLD_SIZES:
                for parallel, rows in table.items():
                    row = measure(project, parallel, size, args.width, args.steps)
                    times = rows.get(str(size), {}).get("step_ms_repeats", []) + [row.pop("step_ms")]
                    rows[str(size)] = {**row, "step_ms": statistics.median(times), "step_ms_repeats": times}
    ratio = {size: table["fsdp"][size]["step_ms"] / table["ddp"][size]["step_ms"] for size in table["ddp"]}
    results = {"memory": {"width": args.width, "global_batch": BATCH, "per_rank": table,
                          "fsdp_vs_ddp_step_time": ratio, "machine": machine(sys.argv[1:])}}
    print(f"{'':10s}{'ranks':>6s}{'params':>12s}{'grads':>12s}{'optimizer':>12s}{'total':>12s}{'step ms':>10s}")
    for parallel, rows in table.items():
        for size, row in rows.items():
            print(f"{parallel:10s}{size:>6s}" + "".join(f"{row[key]:>12,d}" for key in (
                "parameter_bytes", "gradient_bytes", "optimizer_bytes", "total_bytes")) + f"{row['step_ms']:>10.2f}")
    print("fsdp/ddp step time: " + ", ".join(f"{size} ranks {value:.2f}" for size, value in ratio.items()))
    if args.json:
        merge_into(args.json, results)
    return 0


def machine(argv: list[str]) -> dict:
    import torch

    return {"date": datetime.date.today().isoformat(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "command": " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *argv])}


def merge_into(path: Path, results: dict) -> None:
    """Adds `results` to the JSON file (the other benchmark of results-parallel.json keeps its part)."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    path.write_text(json.dumps({**data, **results}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
