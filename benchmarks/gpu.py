"""One prepared script for a CUDA machine: what reproducibility costs on a GPU, and whether it holds.

    python benchmarks/gpu.py [--json FILE]               # on a CUDA machine: one command, under 8 minutes
    python benchmarks/gpu.py --device cpu --smoke        # a dry run of every part but compile, on the CPU, in seconds

Bakes the template and imports the baked package, as benchmarks/run.py does, then:

1. The example task on the GPU, with run.py's own measurements (see its docstring):
   loop_vs_plain, strict_vs_off, and the loaders' ratios (the loaders run on this machine's CPUs);
   read_back_share: the share of our loop's time spent reading the metrics back, that is waiting
   for the GPU, with --log-every 1 (every step, as the loop did before issue 22) and 50 (the
   default), and log_every_50_vs_1, the steps/s of the two.
2. A convolutional network that keeps a GPU busy (BatchNorm, 3x32x32 inputs, batch 128), steps/s:
     off             PyTorch's defaults
     strict          --deterministic strict (deterministic algorithms, cuDNN deterministic, no
                     benchmark, no TF32)
     cudnn_disabled  the widely copied snippet: defaults plus torch.backends.cudnn.enabled = False
     bf16_off, bf16_strict        the same under --precision bf16 (torch.autocast)
     compile_off, compile_strict  the model under --compile (the project's compile_model), timed
                                  after the first steps, which compile
   alternating the contenders, medians of the repeats (compiled ones: one timing each). Then, for
   strict, bf16_strict and compile_strict (and off, for comparison), trains twice from one seed and
   checks that the two weight hashes are equal, bit for bit.

Exit status: 0 when the strict runs were bitwise equal, 1 when not, 2 when no CUDA GPU is visible
(and --device cpu was not given).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# cuBLAS reads this once, when CUDA initialises; strict needs it, so it is set for every contender.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from run import Bench, bake, import_package, machine  # noqa: E402  (benchmarks/run.py)
from torch import nn  # noqa: E402

MODES = {  # example loop: steps, repeats, samples (0: all); conv net: steps, repeats, batch, warm-up steps
    "full": dict(steps=200, repeats=5, samples=0, conv=dict(steps=100, repeats=5, batch=128, warmup=3)),
    "smoke": dict(steps=3, repeats=1, samples=192, conv=dict(steps=2, repeats=1, batch=4, warmup=1)),
}


def conv_net() -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.MaxPool2d(2))

    return nn.Sequential(block(3, 64), block(64, 128), block(128, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(256, 10))


def conv_train(pkg, mode: str, seed: int, device: torch.device, steps: int, batch: int,
               warmup: int) -> tuple[float, str]:
    """(steps/s after the warm-up steps, sha256 of the weights) of the conv net under `mode`."""
    pkg.repro.configure_determinism("strict" if mode.endswith("strict") else "off")
    torch.backends.cudnn.enabled = mode != "cudnn_disabled"
    precision = "bf16" if mode.startswith("bf16") else "fp32"
    pkg.repro.seed_everything(seed)
    model = conv_net().to(device)
    trained = pkg.precision.compile_model(model) if mode.startswith("compile") else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator(device=device).manual_seed(seed)
    images = torch.randn(8, batch, 3, 32, 32, device=device, generator=generator)
    labels = torch.randint(0, 10, (8, batch), device=device, generator=generator)

    def step(i: int) -> None:
        with pkg.precision.autocast(precision, device):
            loss = nn.functional.cross_entropy(trained(images[i % 8]), labels[i % 8])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for i in range(warmup):  # warm-up (and compiling), not timed; part of the run, so hashed too
        step(i)
    synchronize(device)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    synchronize(device)
    rate = steps / (time.perf_counter() - start)
    torch.backends.cudnn.enabled = True
    return rate, pkg.repro.state_dict_sha256(model.state_dict())


def conv_results(pkg, device: torch.device, compile_too: bool, steps: int, repeats: int, batch: int,
                 warmup: int) -> dict[str, object]:
    def train(mode: str, seed: int) -> tuple[float, str]:
        return conv_train(pkg, mode, seed, device, steps, batch, warmup)

    modes = ("off", "strict", "cudnn_disabled", "bf16_off", "bf16_strict")
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode in modes:
            rates[mode].append(train(mode, 0)[0])
    compiled, hashes = ("compile_off", "compile_strict") if compile_too else (), {}
    for mode in compiled:  # compiling takes a while: one timing each, from seed 1, whose hash counts below
        rate, hashes[mode] = train(mode, 1)
        rates[mode] = [rate]
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    bitwise = {mode: (hashes.get(mode) or train(mode, 1)[1]) == train(mode, 1)[1]
               for mode in ("strict", "bf16_strict", *compiled[1:], "off")}
    pkg.repro.configure_determinism("off")
    results = {"conv_steps_per_second": medians,
               "conv_strict_vs_off": medians["strict"] / medians["off"],
               "conv_cudnn_disabled_vs_off": medians["cudnn_disabled"] / medians["off"],
               "conv_bf16_strict_vs_bf16_off": medians["bf16_strict"] / medians["bf16_off"],
               "conv_bf16_strict_vs_strict": medians["bf16_strict"] / medians["strict"],
               "conv_bitwise_equal_twice": bitwise}
    if compile_too:
        results["conv_compile_strict_vs_compile_off"] = medians["compile_strict"] / medians["compile_off"]
        results["conv_compile_strict_vs_strict"] = medians["compile_strict"] / medians["strict"]
    return results


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a dry run")
    parser.add_argument("--smoke", action="store_true", help="every part but compile once, tiny: a test of the script")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: benchmarks/gpu.py needs a CUDA GPU, and none is visible here "
              "(use --device cpu --smoke for a dry run of the script)", file=sys.stderr)
        return 2
    mode = "smoke" if args.smoke else "full"
    steps, repeats, samples, conv = MODES[mode].values()
    device, load_before, started = torch.device(args.device), os.getloadavg(), time.perf_counter()

    results: dict[str, object] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None}
    with tempfile.TemporaryDirectory(prefix="repro-gpu-") as scratch:
        project, _ = bake(Path(scratch))
        pkg = import_package(project)
        torch.set_num_threads(1)  # the project's default (--threads 1), for every contender
        pkg.repro.configure_determinism("off")
        bench = Bench(pkg, Path(scratch), device, samples)
        parts = (("example loop", lambda: bench.loops(steps, repeats)),
                 ("read-backs", lambda: bench.read_back_share(steps, repeats)),
                 ("loaders", lambda: bench.loaders(1, repeats)),
                 ("conv net", lambda: conv_results(pkg, device, compile_too=mode != "smoke", **conv)))
        for name, measure in parts:
            start = time.perf_counter()
            results.update(measure())
            print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    results["machine"] = machine(mode, load_before, started, script="benchmarks/gpu.py")
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(results["conv_bitwise_equal_twice"][m] for m in results["conv_bitwise_equal_twice"] if m != "off") \
        else 1


if __name__ == "__main__":
    sys.exit(main())
