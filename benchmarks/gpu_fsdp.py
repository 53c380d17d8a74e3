"""One prepared script for a machine with two or more GPUs: does --parallel fsdp repeat over NCCL?

    python benchmarks/gpu_fsdp.py [--gpus 2] [--json FILE]
    python benchmarks/gpu_fsdp.py --device cpu --gpus 2    # a dry run of the script itself (gloo)

Bakes the template and, under `torchrun --standalone --nproc-per-node GPUS` (NCCL between the
GPUs), trains the example with --deterministic strict:

  fsdp_fp32, fsdp_fp32_again   --parallel fsdp twice with one seed: the same weights_sha256 and
                               metrics.csv, bit for bit?
  fsdp_bf16, fsdp_bf16_again   the same under --precision bf16 (FSDP's mixed-precision policy)
  fsdp_fp32_resumed            stopped after --stop-at steps, resumed with --resume: the weights
                               of fsdp_fp32?
  ddp_fp32                     --parallel ddp, for comparison (equal bits are not promised)

and prints a verdict per check (exit 1 if one fails), the train_seconds of each run, and writes
the JSON with --json. It needs about a minute on two GPUs; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from memory import PACKAGE, bake, machine  # benchmarks/memory.py, beside this file

FLAGS = ("--epochs", "2", "--max-samples", "512", "--batch-size", "64", "--deterministic", "strict",
         "--checkpoint-every", "4", "--seed", "7")


def train(project: Path, gpus: int, device: str, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
               "-m", f"{PACKAGE}.train", *FLAGS, "--device", device, *args]
    return subprocess.run(command, cwd=project, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(project / "src")})


def read(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    return {"weights_sha256": summary["weights_sha256"], "train_seconds": summary["train_seconds"],
            "metrics": (folder / "metrics.csv").read_text()}


def run_all(project: Path, gpus: int, device: str, stop_at: int) -> dict:
    runs = project / "runs"
    plans = {"fsdp_fp32": ("--parallel", "fsdp"), "fsdp_fp32_again": ("--parallel", "fsdp"),
             "fsdp_bf16": ("--parallel", "fsdp", "--precision", "bf16"),
             "fsdp_bf16_again": ("--parallel", "fsdp", "--precision", "bf16"), "ddp_fp32": ("--parallel", "ddp")}
    for name, args in plans.items():
        result = train(project, gpus, device, *args, "--out", str(runs / name))
        if result.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{result.stderr[-3000:]}")
    stopped = train(project, gpus, device, "--parallel", "fsdp", "--out", str(runs / "fsdp_fp32_resumed"),
                    "--stop-after-steps", str(stop_at))
    resumed = train(project, gpus, device, "--out", str(runs / "fsdp_fp32_resumed"), "--resume")
    if stopped.returncode != 0 or resumed.returncode != 0:
        raise RuntimeError(f"the resumed run failed:\n{stopped.stderr[-2000:]}\n{resumed.stderr[-2000:]}")
    return {name: read(runs / name) for name in [*plans, "fsdp_fp32_resumed"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2, help="processes, one per GPU (default: 2)")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a dry run on gloo")
    parser.add_argument("--stop-at", type=int, default=5, help="the step after which a run stops and resumes")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    if args.device == "cuda":
        import torch

        if torch.cuda.device_count() < args.gpus:
            print(f"this machine has {torch.cuda.device_count()} GPU(s); --gpus {args.gpus} needs as many")
            return 2
    with tempfile.TemporaryDirectory(prefix="gpu-fsdp-") as scratch:
        runs = run_all(bake(Path(scratch)), args.gpus, args.device, args.stop_at)
    checks = {
        "fsdp_fp32_repeats": (runs["fsdp_fp32"], runs["fsdp_fp32_again"]),
        "fsdp_bf16_repeats": (runs["fsdp_bf16"], runs["fsdp_bf16_again"]),
        "fsdp_fp32_resume_is_exact": (runs["fsdp_fp32"], runs["fsdp_fp32_resumed"]),
    }
    verdicts = {name: a["weights_sha256"] == b["weights_sha256"] and a["metrics"] == b["metrics"]
                for name, (a, b) in checks.items()}
    verdicts["ddp_equals_fsdp_fp32 (not promised)"] = runs["ddp_fp32"]["weights_sha256"] == runs["fsdp_fp32"][
        "weights_sha256"]
    for name, verdict in verdicts.items():
        print(f"{name:40s} {'yes' if verdict else 'NO'}")
    for name, run in runs.items():
        print(f"{name:40s} {run['train_seconds']:8.2f} s  {run['weights_sha256'][:16]}")
    if args.json:
        results = {"gpus": args.gpus, "device": args.device, "verdicts": verdicts, "machine": machine(sys.argv[1:]),
                   "runs": {name: {k: v for k, v in run.items() if k != "metrics"} for name, run in runs.items()}}
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0 if all(v for name, v in verdicts.items() if "not promised" not in name) else 1


if __name__ == "__main__":
    sys.exit(main())
