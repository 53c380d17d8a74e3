"""What --cpu-kernels portable does to the bits, and what it costs, on this machine's CPU.

    python benchmarks/portable.py [--repeats 5] [--json benchmarks/results-portable.json]

Bakes the template with its defaults into a scratch folder and trains its example in fresh
processes, exactly as a user would (`python -m my_project.train`), because the kernel pins act only
when set before torch loads:

  hashes         `--seed 1 --epochs 1`, natively and under --cpu-kernels portable, each from a shell
                 with no kernel variable and from shells with one of ATEN_CPU_CAPABILITY,
                 ONEDNN_MAX_CPU_ISA, MKL_CBWR, MKL_ENABLE_INSTRUCTIONS set: the weights_sha256 of each,
                 and one natively from a shell that caps every library at AVX2 (an AVX2-only machine,
                 as far as one machine can play it)
  portable_vs_native
                 training speed (train_seconds, which leaves out start-up) of --cpu-kernels portable
                 against native, alternating the two, median of the per-pair ratios; above 1 means
                 portable is faster. Once for the example as it is, once with --width 64 (bigger
                 convolutions, where the instruction set matters more)

Every figure of the README's "Another machine" section comes from here.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy
import torch

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "my_project"
SHELLS = {
    "none (the libraries pick for this CPU)": {},
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "ATEN_CPU_CAPABILITY=default": {"ATEN_CPU_CAPABILITY": "default"},
    "ONEDNN_MAX_CPU_ISA=AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "MKL_CBWR=AVX2": {"MKL_CBWR": "AVX2"},
    "MKL_ENABLE_INSTRUCTIONS=SSE4_2": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}
# "An AVX2-only machine, as far as one machine can play it": every library capped at AVX2 by the
# bake's own portable pins (engine/startup.py, read from the bake, so that the two cannot part),
# less MKL_CBWR, which fixes MKL's code path for reproducibility rather than capping it.
NOT_A_CAP = "MKL_CBWR"


def bake(scratch: Path) -> Path:
    subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(scratch), str(ROOT), "init_git=no"],
                   check=True, capture_output=True)
    return scratch / PACKAGE


@functools.cache
def kernel_pins(project: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    """The bake's CPU_KERNEL_VARIABLES and PORTABLE_CPU_KERNELS, from its engine/startup.py."""
    code = (f"import json; from {PACKAGE}.engine.startup import CPU_KERNEL_VARIABLES as v, PORTABLE_CPU_KERNELS as p; "
            "print(json.dumps([list(v), p]))")
    found = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(project / "src")})
    variables, pins = json.loads(found.stdout)
    return tuple(variables), pins


def train(project: Path, out: Path, shell: dict[str, str], *flags: str) -> dict:
    """One fresh training process from a shell with `shell`'s variables (and no other kernel
    variable); its summary.json."""
    variables, _ = kernel_pins(project)
    env = {key: value for key, value in os.environ.items() if key not in variables}
    env.update(shell, PYTHONPATH=str(project / "src"))
    subprocess.run([sys.executable, "-m", f"{PACKAGE}.train", "--device", "cpu", "--out", str(out), *flags],
                   check=True, capture_output=True, env=env, cwd=project)
    return json.loads((out / "summary.json").read_text())


def hashes(project: Path, scratch: Path) -> dict:
    table = {}
    for number, (name, shell) in enumerate(SHELLS.items()):
        table[name] = {mode: train(project, scratch / f"h{number}-{mode}", shell, "--seed", "1", "--epochs", "1",
                                   "--cpu-kernels", mode)["weights_sha256"] for mode in ("native", "portable")}
    _, pins = kernel_pins(project)
    avx2_machine = {name: value for name, value in pins.items() if name != NOT_A_CAP}
    avx2 = train(project, scratch / "avx2-machine", avx2_machine, "--seed", "1", "--epochs", "1")
    return {"by_shell": table, "native_on_a_simulated_avx2_machine": avx2["weights_sha256"]}


def speed(project: Path, scratch: Path, repeats: int, *flags: str) -> dict:
    """Alternates native and portable runs; each pair's ratio of train_seconds (native / portable)."""
    seconds = {"native": [], "portable": []}
    for repeat in range(repeats):
        for mode in ("native", "portable") if repeat % 2 == 0 else ("portable", "native"):
            out = scratch / f"speed-{'-'.join(flags)}-{mode}-{repeat}"
            summary = train(project, out, {}, "--cpu-kernels", mode, "--epochs", "3", *flags)
            seconds[mode].append(summary["train_seconds"])
    ratios = [native / portable for native, portable in zip(seconds["native"], seconds["portable"], strict=True)]
    return {"ratio": statistics.median(ratios), "train_seconds": seconds}


def cpuinfo(field: str) -> str | None:
    """A field of /proc/cpuinfo's first processor (Linux), or None."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.split(":")[0].strip() == field), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="pairs of timed runs per workload (default: 5)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="portable-bench-") as scratch:
        project = bake(Path(scratch))
        results = {"hashes": hashes(project, Path(scratch)),
                   "portable_vs_native": speed(project, Path(scratch), args.repeats),
                   "portable_vs_native_width64": speed(project, Path(scratch), args.repeats, "--width", "64")}
    results["machine"] = {"date": datetime.date.today().isoformat(), "platform": platform.platform(),
                          "cpu_vendor": cpuinfo("vendor_id"), "cpu": cpuinfo("model name") or platform.processor(),
                          "cores": os.cpu_count(), "python": platform.python_version(), "numpy": numpy.__version__,
                          "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "repeats": args.repeats}
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
