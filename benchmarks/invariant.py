"""What --invariant-shards costs beside plain DDP, and the hashes it gives on 1, 2 and 4 processes.

    python benchmarks/invariant.py                  # 3 rounds; writes benchmarks/results-invariant.json
    python benchmarks/invariant.py --quick --json /tmp/i.json   # 1 round of 1 epoch
    python benchmarks/invariant.py --smoke --json /tmp/i.json   # 1 round of 1 epoch of 128 samples: a test

Bakes the template with its defaults and trains the example on the CPU (gloo), 3 epochs of 25 steps
of 64 samples, evaluating only at the end (--eval-every 0) and checkpointing only at epoch ends:

  timed     2 processes, plain DDP against --invariant-shards 8 (4 shards of 8 samples on each
            process), alternating round by round; each process notes the time at the end of every
            optimizer step (torch's global step hook) and its peak resident memory at exit. The
            step time is the median over the rounds of (last step's end - first step's end) /
            (steps - 1), the slower rank's; memory the larger rank's.
  hashes    --invariant-shards 8 and plain DDP on 1 and 4 processes (beside the timed runs on 2):
            the weights_sha256 of each. The mode's are one hash; plain DDP's are three.

Where the time goes, by design (engine/invariant.py): each process makes 4 forward and backward
passes of 8 samples where DDP makes one of 32, copies each shard's gradients into a row, gathers
8 rows from both processes and adds them in order, where DDP all-reduces one copy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from memory import PACKAGE, bake, machine  # benchmarks/memory.py, beside this file

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results-invariant.json"
SHARDS = 8
FLAGS = ("--device", "cpu", "--batch-size", "64", "--eval-every", "0", "--checkpoint-every", "0")
# Run under torchrun in place of `-m <package>.train`: the same main(), with the probe around it.
PROBE = '''
import json, os, resource, sys, time
from torch.optim.optimizer import register_optimizer_step_post_hook
from {package} import train

ends = []
register_optimizer_step_post_hook(lambda *args: ends.append(time.perf_counter()))
code = train.main(sys.argv[2:])
with open(os.path.join(sys.argv[1], "rank" + os.environ.get("RANK", "0") + ".json"), "w") as out:
    json.dump({{"steps": len(ends), "seconds": ends[-1] - ends[0],
               "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}, out)
sys.exit(code)
'''


def train(project: Path, folder: Path, world_size: int, *args: str) -> dict:
    """One run of the probed train on `world_size` processes: its hash, step time and peak memory."""
    folder.mkdir(parents=True)
    script = project / "probe.py"
    script.write_text(PROBE.format(package=PACKAGE))
    runner = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}"]
    result = subprocess.run([*runner, str(script), str(folder), *FLAGS, *args, "--out", str(folder / "run")],
                            cwd=project, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(project / "src"), "PYTHONHASHSEED": "42"})
    if result.returncode != 0:
        raise RuntimeError(f"{args} on {world_size} failed:\n{result.stderr[-3000:]}")
    ranks = [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(world_size)]
    summary = json.loads((folder / "run" / "summary.json").read_text())
    return {"weights_sha256": summary["weights_sha256"],
            "ms_per_step": max(1000 * rank["seconds"] / (rank["steps"] - 1) for rank in ranks),
            "peak_mb": max(rank["peak_mb"] for rank in ranks)}


def quoted(record: dict) -> dict[str, str]:
    """What docs/distributed.md (en and zh) quotes from a record, as it writes it."""
    machine_, median = record["machine"], record["median"]

    def hashes(mode: str) -> str:
        return " / ".join(f"`{record['hashes'][mode][size][:12]}`" for size in ("1", "2", "4"))

    return {"date": machine_["date"], "machine": f"{machine_['cpus']} CPU cores, torch {machine_['torch']}",
            "load": f"{machine_['load_average'][0]:.1f}", "rounds": str(record["settings"]["rounds"]),
            "ddp_ms": f"{median['ddp']['ms_per_step']:.1f} ms",
            "invariant_ms": f"{median['invariant']['ms_per_step']:.1f} ms",
            "ratio": f"{record['step_time_ratio']:.2f}",
            "one_process_ratio": f"{record['one_process_step_time_ratio']:.2f}",
            "ddp_mb": f"{median['ddp']['peak_mb']:.0f} MB",
            "invariant_mb": f"{median['invariant']['peak_mb']:.0f} MB", "ddp_hashes": hashes("ddp"),
            "invariant_hashes": hashes("invariant")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 round of 1 epoch")
    parser.add_argument("--smoke", action="store_true", help="1 round of 1 epoch of 128 samples (a test)")
    parser.add_argument("--json", type=Path, default=RECORD)
    args = parser.parse_args(argv)
    rounds, epochs = (1, 1) if args.quick or args.smoke else (args.rounds, 3)
    invariant = ("--invariant-shards", str(SHARDS), *(("--max-samples", "128") if args.smoke else ()))
    plain = ("--max-samples", "128") if args.smoke else ()
    with tempfile.TemporaryDirectory() as scratch:
        project = bake(Path(scratch))
        timed = {"ddp": [], "invariant": []}
        for round_ in range(rounds):
            for mode, extra in (("ddp", plain), ("invariant", invariant)):
                timed[mode].append(train(project, Path(scratch) / f"{mode}{round_}", 2, "--epochs", str(epochs),
                                         *extra))
                print(f"round {round_ + 1}: {mode} {timed[mode][-1]['ms_per_step']:.2f} ms/step", flush=True)
        hashes = {"invariant": {"2": timed["invariant"][0]["weights_sha256"]},
                  "ddp": {"2": timed["ddp"][0]["weights_sha256"]}}
        others = {}  # 1 and 4 processes: one run each
        for size in (1, 4):
            for mode, extra in (("ddp", plain), ("invariant", invariant)):
                others[f"{mode}_on_{size}"] = train(project, Path(scratch) / f"{mode}-on-{size}", size, "--epochs",
                                                    str(epochs), *extra)
                hashes[mode][str(size)] = others[f"{mode}_on_{size}"]["weights_sha256"]
    median = {mode: {key: statistics.median(run[key] for run in runs) for key in ("ms_per_step", "peak_mb")}
              for mode, runs in timed.items()}
    record = {"machine": {**machine(argv if argv is not None else sys.argv[1:]),
                          "load_average": list(os.getloadavg())},
              "settings": {"world_size": 2, "invariant_shards": SHARDS, "batch_size": 64, "epochs": epochs,
                           "rounds": rounds, "max_samples": 128 if args.smoke else 0},
              "median": median,
              "step_time_ratio": median["invariant"]["ms_per_step"] / median["ddp"]["ms_per_step"],
              # One process: the shards' own cost, without any communication (one run each, not alternated).
              "one_process_step_time_ratio": (others["invariant_on_1"]["ms_per_step"]
                                              / others["ddp_on_1"]["ms_per_step"]),
              "hashes": hashes, "rounds": timed, "one_and_four": others}
    args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"median": median, "step_time_ratio": record["step_time_ratio"], "hashes": hashes}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
