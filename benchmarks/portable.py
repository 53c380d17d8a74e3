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
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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
NUMPY_AVX512 = "X86_V4 AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                "NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512}
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
                    "NPY_DISABLE_CPU_FEATURES")


def bake(scratch: Path) -> Path:
    subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(scratch), str(ROOT), "init_git=no"],
                   check=True, capture_output=True)
    return scratch / PACKAGE


def train(project: Path, out: Path, shell: dict[str, str], *flags: str) -> dict:
    """One fresh training process from a shell with `shell`'s variables (and no other kernel
    variable); its summary.json."""
    env = {key: value for key, value in os.environ.items() if key not in KERNEL_VARIABLES}
    env.update(shell, PYTHONPATH=str(project / "src"))
    subprocess.run([sys.executable, "-m", f"{PACKAGE}.train", "--device", "cpu", "--out", str(out), *flags],
                   check=True, capture_output=True, env=env, cwd=project)
    return json.loads((out / "summary.json").read_text())


def hashes(project: Path, scratch: Path) -> dict:
    table = {}
    for number, (name, shell) in enumerate(SHELLS.items()):
        table[name] = {mode: train(project, scratch / f"h{number}-{mode}", shell, "--seed", "1", "--epochs", "1",
                                   "--cpu-kernels", mode)["weights_sha256"] for mode in ("native", "portable")}
    avx2 = train(project, scratch / "avx2-machine", AVX2_MACHINE, "--seed", "1", "--epochs", "1")
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
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else None
    results["machine"] = {"date": datetime.date.today().isoformat(), "platform": platform.platform(),
                          "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
                          "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "repeats": args.repeats}
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
