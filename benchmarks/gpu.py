"""One prepared script for a CUDA machine: what determinism costs on a GPU, and whether it holds.

    python benchmarks/gpu.py [--steps 100] [--repeats 5] [--json FILE]
    python benchmarks/gpu.py --device cpu --steps 3 --repeats 1     # a dry run of the script itself

Bakes the template, takes its `configure_determinism`, `seed_everything` and `state_dict_sha256`,
and on a convolutional network (BatchNorm, 3x32x32 inputs, batch 128) measures steps per second for:

  off             PyTorch's defaults
  strict          --deterministic strict (deterministic algorithms, cuDNN deterministic, no benchmark,
                  no TF32)
  cudnn_disabled  the widely copied snippet: defaults plus torch.backends.cudnn.enabled = False
  bf16_off, bf16_strict        the same under --precision bf16 (torch.autocast)
  compile_off, compile_strict  the model under --compile (the project's compile_model), timed after
                               the first steps, which compile

alternating the contenders, medians of the repeats (compiled ones: one timing each, compiling is
slow). Then, for strict, bf16_strict and compile_strict (and off, for comparison), trains twice
from one seed and checks that the two weight hashes are equal, bit for bit.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# cuBLAS reads this once, when CUDA initialises; strict needs it, so it is set for every contender.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from torch import nn  # noqa: E402


def conv_net() -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.MaxPool2d(2))

    return nn.Sequential(block(3, 64), block(64, 128), block(128, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(256, 10))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: benchmarks/gpu.py needs a CUDA GPU, and none is visible here "
              "(use --device cpu for a dry run of the script)", file=sys.stderr)
        return 2
    device = torch.device(args.device)

    scratch = Path(tempfile.mkdtemp(prefix="repro-gpu-"))
    subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(scratch), str(ROOT)],
                   check=True, capture_output=True)
    sys.path.insert(0, str(scratch / "my_project" / "src"))
    repro = importlib.import_module("my_project.utils.repro")
    precision = importlib.import_module("my_project.utils.precision")

    def set_mode(mode: str) -> None:
        repro.configure_determinism("strict" if mode.endswith("strict") else "off")
        torch.backends.cudnn.enabled = mode != "cudnn_disabled"

    def train(mode: str, seed: int, steps: int) -> tuple[float, str]:
        set_mode(mode)
        dtype = "bf16" if mode.startswith("bf16") else "fp32"
        repro.seed_everything(seed)
        model = conv_net().to(device)
        trained = precision.compile_model(model) if mode.startswith("compile") else model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        generator = torch.Generator(device=device).manual_seed(seed)
        images = torch.randn(8, 128, 3, 32, 32, device=device, generator=generator)
        labels = torch.randint(0, 10, (8, 128), device=device, generator=generator)

        def step(i: int) -> None:
            with precision.autocast(dtype, device):
                loss = nn.functional.cross_entropy(trained(images[i % 8]), labels[i % 8])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        for i in range(3):  # warm-up (and compiling), not timed; part of the run, so hashed too
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return steps / (time.perf_counter() - start), repro.state_dict_sha256(model.state_dict())

    modes = ("off", "strict", "cudnn_disabled", "bf16_off", "bf16_strict")
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(args.repeats):
        for mode in modes:
            rates[mode].append(train(mode, 0, args.steps)[0])
    for mode in ("compile_off", "compile_strict"):
        rates[mode] = [train(mode, 0, args.steps)[0]]
    medians = {mode: statistics.median(values) for mode, values in rates.items()}

    bitwise = {}
    for mode in ("strict", "bf16_strict", "compile_strict", "off"):
        hashes = [train(mode, 1, args.steps)[1] for _ in range(2)]
        bitwise[mode] = hashes[0] == hashes[1]
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "steps_per_second": medians,
        "strict_vs_off": medians["strict"] / medians["off"],
        "cudnn_disabled_vs_off": medians["cudnn_disabled"] / medians["off"],
        "bf16_strict_vs_bf16_off": medians["bf16_strict"] / medians["bf16_off"],
        "bf16_strict_vs_strict": medians["bf16_strict"] / medians["strict"],
        "compile_strict_vs_compile_off": medians["compile_strict"] / medians["compile_off"],
        "compile_strict_vs_strict": medians["compile_strict"] / medians["strict"],
        "bitwise_equal_twice": bitwise,
        "command": "python benchmarks/gpu.py " + " ".join(sys.argv[1:]),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(bitwise[mode] for mode in ("strict", "bf16_strict", "compile_strict")) else 1


if __name__ == "__main__":
    sys.exit(main())
