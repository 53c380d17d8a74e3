"""Checks whether this machine and these settings can give bitwise repeatable runs.

    python -m {{ cookiecutter.project_slug }}.doctor [--deterministic strict] [--device auto] [--quick]
    python -m {{ cookiecutter.project_slug }}.doctor runs/a [--requirements requirements-run.txt]
    python -m {{ cookiecutter.project_slug }}.doctor --fingerprint mine.json [--against theirs.json]

Reports versions and devices; what decides the CPU's bits (the instruction sets ATen, oneDNN and
MKL use, and their versions); the determinism settings in effect; environment variables set too
late to matter, and CUDA initialised too early; which ops would stop a strict run on this device,
and what to do about them. Then (unless --quick) trains a few steps twice, in two fresh processes,
and checks that both give the same losses and weights, bit for bit. Exit 0 when all is well;
--quick claims only what it checked, not that runs repeat.

With a run folder it also says what differs between the machine that made the run and this one,
and which installed packages differ from the run's; --requirements FILE writes a requirements file
that reinstalls the run's whole software stack. Its trial runs then take the run's settings (its
model, batch, precision, determinism mode, device, world size), not the defaults.

--fingerprint FILE writes what this machine computes for each operation a run depends on, at fixed
inputs (engine/fingerprint.py), natively and under --cpu-kernels portable, and does nothing else;
--against THEIRS compares it with another machine's and names the first operation where they part.

`late_environment_problems()` can also be called from your own code, first thing in main().
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from .config import Config, config_to_flags, integer
from .engine.cli import make_parser, prog, run_command
from .engine.endings import explain_nondeterministic_error
from .engine.environment import (
    NOTABLE_CPU_FLAGS,
    cpu_libraries,
    gpu_driver,
    installed_packages,
    package_differences,
    requirements_text,
)
from .engine.files import atomic_write_text, scratch_problem
from .engine.fingerprint import compare_fingerprints, machine_fingerprint, read_fingerprint
from .engine.launch import launch_training
from .engine.runs import Run, RunError, read_run
from .engine.startup import CPU_KERNEL_VARIABLES, cpu_info, cpu_kernel_variables, initial_environment
from .utils.device import available_devices, select_device
from .utils.repro import (
    DETERMINISM_MODES,
    configure_determinism,
    determinism_flags,
    state_dict_sha256,
)

# Variables read once: PYTHONHASHSEED when Python starts, the kernel pins when torch loads, the CUDA
# ones when CUDA initialises.
READ_AT_START = ("PYTHONHASHSEED", *CPU_KERNEL_VARIABLES)
READ_AT_CUDA_INIT = ("CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES")


def late_environment_problems() -> list[str]:
    """Variables changed in os.environ after the moment they were read, and CUDA started too early."""
    problems = []
    initial = initial_environment()
    cuda_started = torch.cuda.is_initialized()
    if initial is not None:
        for name in READ_AT_START + READ_AT_CUDA_INIT:
            if os.environ.get(name) == initial.get(name):
                continue
            if name in READ_AT_START:
                problems.append(f"{name} was set to {os.environ.get(name)!r} after Python started: it has no "
                                "effect on this process (set it in the shell; train relaunches itself instead)")
            elif cuda_started:
                problems.append(f"{name} was set to {os.environ.get(name)!r} after CUDA initialised: it has no "
                                "effect (set it before any tensor goes to the GPU, or in the shell)")
    if cuda_started:
        problems.append("CUDA is already initialised in this process: CUBLAS_WORKSPACE_CONFIG and "
                        "CUDA_VISIBLE_DEVICES can no longer change; configure determinism before touching the GPU")
    return problems


def probe_ops(device: torch.device) -> dict[str, str]:
    """Ops without a deterministic implementation on some device: which ones refuse here, and why."""
    def ones(*shape: int) -> torch.Tensor:
        return torch.ones(*shape, device=device)

    def pooled():
        return torch.nn.functional.max_pool2d(torch.rand(1, 1, 4, 4, device=device), 2, return_indices=True)

    def interpolate_backward():
        x = torch.rand(1, 1, 4, 4, device=device, requires_grad=True)
        torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear").sum().backward()

    ops = {
        "max_unpool2d": lambda: torch.nn.functional.max_unpool2d(*pooled(), 2),
        "Tensor.put_": lambda: ones(4).put_(torch.tensor([0, 0], device=device), ones(2)),
        "Tensor.index_add_": lambda: ones(3).index_add_(0, torch.tensor([0, 0], device=device), ones(2)),
        "Tensor.scatter_add_": lambda: ones(3).scatter_add_(0, torch.tensor([0, 0], device=device), ones(2)),
        "interpolate(bilinear) backward": interpolate_backward,
        "histc": lambda: torch.histc(ones(8)),
        "bincount(weights)": lambda: torch.bincount(torch.tensor([0, 1], device=device), weights=ones(2)),
    }
    refused = {}
    for name, op in ops.items():
        try:
            op()
        except RuntimeError as error:
            explanation = explain_nondeterministic_error(error, device.type)
            if explanation is not None:
                refused[name] = explanation
    return refused


def trial_flags(run: Run | None, mode: str, device: str, steps: int) -> list[str]:
    """train's flags for a trial of `steps` steps: the run's settings (its config.json) with the
    determinism mode to check, or else the defaults on `device`."""
    if run is None:
        settings = ["--epochs", "1", "--device", device]
    else:
        config, _ = Config.from_dict({**run.config, "world_size": 1})
        settings = config_to_flags(config)
    return [*settings, "--deterministic", mode, "--stop-after-steps", str(steps), "--checkpoint-every", "0"]


def trial_run(out: Path, flags: list[str], run: Run | None) -> subprocess.Popen:
    """A trial in a fresh process; with as many processes as the run started with, under torchrun."""
    world_size = 1 if run is None else int(run.config.get("world_size", 1))
    fsdp = run is not None and run.config.get("parallel") == "fsdp"
    return launch_training("--out", str(out), *flags, world_size=world_size, torchrun=fsdp)


def trial_fingerprint(out: Path) -> str:
    """sha256 of the trial's metrics and of the weights in its checkpoint."""
    checkpoint = sorted((out / "checkpoints").glob("step-*.pt"))[-1]
    weights = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
    metrics = hashlib.sha256((out / "metrics.csv").read_bytes()).hexdigest()
    return f"metrics {metrics[:16]} weights {state_dict_sha256(weights)[:16]}"


def build_parser():
    parser = make_parser("doctor", "Check this machine for reproducible training.")
    parser.add_argument("--deterministic", choices=DETERMINISM_MODES, default=None,
                        help="the mode to check (default: the run's, with RUN_DIR; else "
                             {{ cookiecutter.determinism|tojson }} ")")
    parser.add_argument("--device", default="auto", help="the device to check (default: %(default)s)")
    parser.add_argument("--steps", type=integer(1), default=5,  # what the trial runs' --stop-after-steps takes
                        help="steps of each trial run (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="skip the two trial runs (default: off)")
    parser.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR",
                        help="a run folder: say what differs between its machine and software and this one's")
    parser.add_argument("--requirements", type=Path, metavar="FILE",
                        help="with RUN_DIR: write a requirements file that reinstalls the run's software stack")
    parser.add_argument("--fingerprint", type=Path, metavar="FILE",
                        help="write this machine's digests of the operations a run depends on to FILE, and stop")
    parser.add_argument("--against", type=Path, metavar="THEIRS",
                        help="with --fingerprint: compare with another machine's and name the first operation "
                             "that differs (exit 1 if one does)")
    return parser


def fingerprint_command(parser, args) -> int:
    """--fingerprint FILE [--against THEIRS]: bad input refused before anything is computed."""
    if args.run_dir is not None or args.requirements is not None:
        parser.error("--fingerprint takes no run folder and no --requirements")
    if args.fingerprint.is_dir() or not args.fingerprint.parent.is_dir() \
            or not os.access(args.fingerprint.parent, os.W_OK):
        parser.error(f"--fingerprint {args.fingerprint}: cannot write a file there")
    try:
        theirs = read_fingerprint(args.against) if args.against is not None else None
    except ValueError as error:
        parser.error(f"--against: {error}")
    mine = machine_fingerprint()
    atomic_write_text(args.fingerprint, json.dumps(mine, indent=2) + "\n")
    modes = ", ".join(f"{mode} ({record['aten']})" for mode, record in mine["modes"].items() if record)
    print(f"fingerprint of {mine['cpu']}, {modes} -> {args.fingerprint}")
    if mine["portable_problem"]:
        print(f"no portable record: {mine['portable_problem']}")
    if theirs is None:
        return 0
    lines, same = compare_fingerprints(mine, theirs)
    print(f"against {args.against} ({theirs.get('cpu')}):")
    for line in lines:
        print(f"  {line}")
    return 0 if same else 1


def cpu_report(device: torch.device) -> None:
    """What decides the CPU's bits here: the instruction sets the CPU has and the ones its libraries
    use, their versions, the variables that pin them; and the GPU's model, generation and driver."""
    cpu, capability = cpu_info(), torch.backends.cpu.get_cpu_capability()
    libraries = cpu_libraries(torch.__config__.show())
    pins = {name: value for name, value in cpu_kernel_variables().items() if value is not None}
    flags = "unknown" if cpu["flags"] is None else ", ".join(sorted(cpu["flags"] & NOTABLE_CPU_FLAGS)) or "none"
    print(f"CPU: {cpu['model']} ({cpu['machine']}); instruction sets the libraries look for: {flags}")
    print(f"CPU kernels: ATen uses {capability}; BLAS {libraries['blas']}, MKL {libraries['mkl']}, oneDNN "
          f"{libraries['onednn']}; pinned by " + (" ".join(f"{k}={v}" for k, v in pins.items()) or "nothing (native)"))
    if capability.startswith("AVX512"):
        print(f"note: runs here use {capability} kernels; a CPU without AVX-512 computes other bits, unless both "
              "run with --cpu-kernels portable")
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        print(f"GPU: {torch.cuda.get_device_name(device)}, compute capability {major}.{minor}, driver {gpu_driver()}")
    note = cuda_build_note()
    if note:
        print(note)


def cuda_build_note() -> str | None:
    """A CUDA build of torch on a machine without a usable GPU: what the CPU build would save."""
    if torch.version.cuda is None or torch.cuda.is_available():
        return None
    return (f"note: torch {torch.__version__} is a CUDA {torch.version.cuda} build, and this machine has no usable "
            "GPU. The CPU build trains the same here and is much smaller to download and install (it leaves out "
            "the CUDA libraries, most of a CUDA build's size): python -m pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu")


def run_report(run: Run, requirements: Path | None) -> list[str]:
    """What differs between the machine and software that made `run` and this one's; writes the
    requirements file if asked. Returns the problems (a run this machine cannot re-run at all)."""
    from .verify import machine_check

    refusal, differing = machine_check(run)
    print(f"{run.path} vs this machine:" + ("" if differing or refusal else " the same machine entries"))
    for line in differing:
        print(f"  {line}")
    recorded = run.environment.get("packages")
    if recorded is None:
        print(f"note: {run.path} did not record its packages (it is older than that record)")
    else:
        changed = package_differences(recorded, installed_packages()["packages"])
        print(f"packages that differ from the run's ({len(changed)} of {len(recorded)} recorded; recorded -> here)"
              + (":" if changed else ": none"))
        for line in changed:
            print(f"  {line}")
    if requirements is not None:
        command = f"{prog('doctor')} {run.path} --requirements {requirements}"
        atomic_write_text(requirements, requirements_text(run.environment, str(run.path), command))
        print(f"requirements written to {requirements}: python -m pip install -r {requirements}")
    return [refusal] if refusal else []


def trial_problems(run: Run | None, mode: str, device: str, steps: int) -> list[str]:
    """Trains `steps` steps twice, in two fresh processes at once, and compares them bit for bit."""
    flags = trial_flags(run, mode, device, steps)
    with tempfile.TemporaryDirectory(prefix="doctor-") as scratch:
        outs = [Path(scratch) / name for name in ("first", "second")]
        processes = [trial_run(out, flags, run) for out in outs]
        results = [process.communicate() for process in processes]
        failed = [err for process, (_, err) in zip(processes, results, strict=True) if process.returncode != 0]
        if failed:
            return ["a trial run failed: " + (failed[0].strip().splitlines() or ["?"])[-1]]
        first, second = (trial_fingerprint(out) for out in outs)
    settings = "the defaults" if run is None else f"the settings of {run.path}"
    print(f"two trial runs of {steps} steps in fresh processes, with {settings}: {first} | {second}")
    return [] if first == second else ["two runs with one seed gave different results on this machine"]


def determinism_problems(mode: str) -> list[str]:
    """Applies `mode` as training would, prints the settings then in effect, returns the problems."""
    problems = []
    try:
        configure_determinism(mode)
    except RuntimeError as error:
        problems.append(str(error))
    flags = determinism_flags()
    print("determinism in effect: " + ", ".join(f"{key}={value}" for key, value in flags.items()))
    if mode == "off":
        print("note: --deterministic off keeps PyTorch's defaults; on a GPU, runs may differ")
    elif flags["tf32_allowed"]:
        problems.append(f"TF32 is allowed ({flags['float32_precision']}) although --deterministic is {mode}: "
                        "float32 results would depend on the GPU model")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.against is not None and args.fingerprint is None:
        parser.error("--against needs --fingerprint FILE: doctor --fingerprint mine.json --against theirs.json")
    if args.fingerprint is not None:
        return fingerprint_command(parser, args)
    run = run_or_refuse(parser, args)
    mode = mode_to_check(args.deterministic, run)
    if not args.quick and scratch_problem():  # the trial runs go into scratch folders
        parser.error(scratch_problem())
    problems = late_environment_problems()  # first, before this process changes anything
    try:
        device = select_device(args.device)
    except ValueError as error:
        parser.error(str(error))

    print(f"python {sys.version.split()[0]}  torch {torch.__version__}  numpy {np.__version__}  "
          f"CUDA {torch.version.cuda}  cuDNN {torch.backends.cudnn.version() if torch.cuda.is_available() else None}")
    print(f"devices: {', '.join(available_devices())}; checking {device}")
    cpu_report(device)
    if run is not None:
        problems += run_report(run, args.requirements)
    problems += determinism_problems(mode)

    refused = probe_ops(device)
    if refused:
        print(f"ops that {mode} mode refuses on {device} (fine unless your model uses them):")
        for name, explanation in refused.items():
            print(f"  {name}: {explanation}")
    if not args.quick:
        problems += trial_problems(run, mode, str(device), args.steps)

    return report_verdict(problems, args.quick)


def mode_to_check(typed: str | None, run: Run | None) -> str:
    """--deterministic as typed; else the run's mode, with RUN_DIR; else the project's default."""
    return typed or (run.config.get("deterministic") if run is not None else None) \
        or {{ cookiecutter.determinism|tojson }}


def report_verdict(problems: list[str], quick: bool) -> int:
    """Prints each problem and the verdict, which claims only what was checked; the exit status."""
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        print(f"VERDICT: {len(problems)} problem(s); bitwise reproducibility is not assured here")
        return 1
    if quick:
        print("VERDICT: no problem found by these checks (--quick: no trial runs, so whether runs repeat bit for "
              "bit here was not tried)")
    else:
        print("VERDICT: OK, runs repeat bit for bit here with these settings")
    return 0


def run_or_refuse(parser, args) -> Run | None:
    """The run folder named on the command line, read; one line and exit 2 for a bad one, or for a
    --requirements file that cannot be written (checked now, not after the trial runs)."""
    if args.run_dir is None:
        if args.requirements is not None:
            parser.error("--requirements needs a run folder: doctor RUN_DIR --requirements FILE")
        return None
    try:
        run = read_run(args.run_dir)
    except RunError as error:
        parser.error(str(error))
    if args.requirements is not None:
        if "packages" not in run.environment:
            parser.error(f"{args.run_dir} did not record its packages (it is older than that record)")
        if args.requirements.is_dir() or not args.requirements.parent.is_dir() \
                or not os.access(args.requirements.parent, os.W_OK):
            parser.error(f"--requirements {args.requirements}: cannot write a file there")
    return run


if __name__ == "__main__":
    sys.exit(run_command("doctor", main))
