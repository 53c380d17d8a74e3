"""What a run records of the machine and software it ran on (environment.json), and what differs.

PyTorch promises bitwise equality only on the same machine and software stack; ENVIRONMENT_KEYS
are the entries that promise depends on, the rest is informative. On a CPU the machine's part is
more than its name: which instruction sets ATen, oneDNN and MKL use (cpu_capability and the
variables that pin them) decides the bits, so they are recorded, with the libraries' versions.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import subprocess
from pathlib import Path

import numpy as np
import torch

from ..utils.device import available_devices
from ..utils.repro import determinism_flags, hash_seed_in_effect
from .cli import prog
from .runs import RunError, read_json
from .startup import PORTABLE_CPU_KERNELS, cpu_info, cpu_kernel_variables, portable_problem

# What must match for PyTorch to promise bitwise equality; other environment keys are informative.
ENVIRONMENT_KEYS = ("python", "torch", "numpy", "cuda", "cudnn", "device", "device_name", "intra_op_threads",
                    "python_hash_seed", "determinism", "platform", "world_size", "machine", "cpu_model",
                    "cpu_capability", "cpu_kernel_variables", "blas", "mkl", "onednn", "gpu_driver",
                    "compute_capability")
# The entries that describe the machine and its software, which verify compares before it re-runs;
# the others (hash seed, determinism flags) the training process sets itself from the config.
MACHINE_KEYS = tuple(key for key in ENVIRONMENT_KEYS if key not in ("python_hash_seed", "determinism"))
# Environment variables that change results or say how they were obtained; recorded per run.
RECORDED_ENV = ("CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "CUDA_LAUNCH_BLOCKING")
# The instruction-set flags that decide which kernels the CPU libraries may pick (x86, then ARM).
NOTABLE_CPU_FLAGS = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                     "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve",
                     "sve2", "bf16", "i8mm"}
# What a difference in each entry does to the bits, and what to do about it: (verdict, advice).
EXPLAINED = {
    "python": ("may change bits", "install the recorded Python version"),
    "torch": ("changes bits", "kernels change between releases; install the recorded stack "
              "(doctor RUN --requirements FILE writes it)"),
    "numpy": ("may change bits", "data made with NumPy can differ between versions; install the recorded stack"),
    "cuda": ("changes bits on a GPU", "install the torch build the run used (doctor RUN --requirements FILE)"),
    "cudnn": ("changes bits on a GPU", "install the torch build the run used (doctor RUN --requirements FILE)"),
    "device": ("changes bits", "CPU and GPU kernels differ; rerun on the recorded device"),
    "device_name": ("changes bits on a GPU", "other GPU models run other kernels; on a CPU, cpu_capability is "
                    "what matters"),
    "intra_op_threads": ("changes bits", "reductions are split by thread; rerun both with one --threads"),
    "python_hash_seed": ("changes bits if the task iterates sets of strings", f"start training as "
                         f"`{prog('train')}`, which sets it from --seed"),
    "determinism": ("changes bits", "rerun both with one --deterministic"),
    "platform": ("not known to change bits", "the operating system and its version; the other entries say "
                 "what matters"),
    "world_size": ("changes bits", "each batch is split across another number of processes; rerun with the "
                   "recorded number (torchrun --nproc-per-node)"),
    "machine": ("changes bits", "another architecture runs other kernels, and no setting bridges it"),
    "cpu_model": ("may change bits", "through the instruction sets and cache sizes the CPU libraries plan for; "
                  "rerun both with --cpu-kernels portable"),
    "cpu_capability": ("changes bits", "ATen's vectorised kernels differ by instruction set; rerun both with "
                       "--cpu-kernels portable"),
    "cpu_kernel_variables": ("changes bits", "they choose ATen's, oneDNN's, MKL's and NumPy's code paths; rerun both "
                             "with --cpu-kernels portable, which sets them"),
    "blas": ("changes bits", "another BLAS sums matrix products in another order; install the recorded torch build"),
    "mkl": ("changes bits", "install the recorded torch build (MKL comes with it)"),
    "onednn": ("changes bits", "install the recorded torch build (oneDNN comes with it)"),
    "gpu_driver": ("may change bits", "install the recorded driver if the rest is equal and results differ"),
    "compute_capability": ("changes bits", "another GPU generation runs other kernels, and no setting bridges it"),
}


def git_commit() -> str | None:
    """The commit of the project's checkout, with '+dirty' for uncommitted changes; None outside git."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def describe_environment(device: torch.device, world_size: int, backend: str | None) -> dict:
    cuda = torch.cuda.is_available()
    cpu = cpu_info()
    return {
        "world_size": world_size,
        "distributed_backend": backend,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else platform.processor() or platform.machine()),
        "available_devices": available_devices(),
        "intra_op_threads": torch.get_num_threads(),
        "python_hash_seed": hash_seed_in_effect(),
        "determinism": determinism_flags(),
        "environment_variables": {name: os.environ.get(name) for name in RECORDED_ENV},
        "git_commit": git_commit(),
        "machine": cpu["machine"],
        "cpu_model": cpu["model"],
        "cpu_flags": sorted(cpu["flags"] & NOTABLE_CPU_FLAGS) if cpu["flags"] is not None else None,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_kernel_variables": cpu_kernel_variables(),
        **cpu_libraries(torch.__config__.show()),
        "gpu_driver": gpu_driver() if device.type == "cuda" else None,
        "compute_capability": (".".join(map(str, torch.cuda.get_device_capability(device)))
                               if device.type == "cuda" else None),
        **installed_packages(),
    }


def cpu_libraries(config_text: str) -> dict[str, str | None]:
    """The BLAS torch was built with, and the MKL and oneDNN versions, from torch.__config__.show()."""
    def found(pattern: str) -> str | None:
        match = re.search(pattern, config_text)
        return match.group(1) if match else None

    return {"blas": found(r"BLAS_INFO=(\w+)"), "mkl": found(r"Math Kernel Library Version ([\d.]+)"),
            "onednn": found(r"(?:MKL-DNN|oneDNN) v([\w.]+)")}


def gpu_driver() -> str | None:
    """The NVIDIA driver's version, as nvidia-smi says it; None without nvidia-smi."""
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = result.stdout.split()
    return lines[0] if result.returncode == 0 and lines else None


def installed_packages() -> dict[str, dict[str, str]]:
    """Every installed distribution and its version ("packages"), and where the ones that came from no
    package index came from ("package_sources": an editable checkout, a URL, a local file)."""
    packages, sources = {}, {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if not name or name in packages:  # the first on sys.path is the one Python imports
            continue
        packages[name] = distribution.version
        direct = distribution.read_text("direct_url.json")
        if direct:
            sources[name] = json.loads(direct).get("url", "?")
    return {"packages": dict(sorted(packages.items(), key=lambda item: item[0].lower())), "package_sources": sources}


def machine_environment(config, device: torch.device) -> dict:
    """This machine's entries as a run of `config` will record them, known before it starts: what
    this process sees, with the thread count and, under --cpu-kernels portable, the pins that the
    training process sets for itself."""
    now = describe_environment(device, config.world_size, None)
    now["intra_op_threads"] = config.threads
    if config.cpu_kernels == "portable":
        now["cpu_kernel_variables"] = dict(PORTABLE_CPU_KERNELS)
        now["cpu_capability"] = PORTABLE_CPU_KERNELS["ATEN_CPU_CAPABILITY"].upper()
    return now


def differences(a: dict, b: dict, keys: tuple[str, ...] | None = None) -> list[str]:
    """'key: value_a -> value_b' for each key whose values differ."""
    names = keys if keys is not None else tuple(dict.fromkeys([*a, *b]))
    return [f"{name}: {a.get(name)!r} -> {b.get(name)!r}" for name in names if a.get(name) != b.get(name)]


def environment_differences(recorded: dict, now: dict) -> list[str]:
    """What differs, among the entries that bitwise equality depends on."""
    return differences(recorded, now, ENVIRONMENT_KEYS)


def environment_changes(out: Path, now: dict) -> list[str]:
    """What differs, among the entries that bitwise equality depends on, between the environment
    recorded when the run in `out` started and `now`."""
    try:
        recorded = read_json(out / "environment.json", required=False)
    except RunError as error:
        return [str(error)]
    if recorded is None:
        return ["environment.json is missing"]
    return environment_differences(recorded, now)


def explained_differences(recorded: dict, now: dict, keys: tuple[str, ...] = ENVIRONMENT_KEYS) -> list[str]:
    """One line per entry that differs: both values, whether it is known to change bits, what to do."""
    lines = []
    for name in keys:
        if recorded.get(name) == now.get(name):
            continue
        if name not in recorded:
            lines.append(f"{name}: not recorded (the run is older than this entry); here {now.get(name)!r}")
            continue
        verdict, advice = EXPLAINED[name]
        lines.append(f"{name}: {change(recorded.get(name), now.get(name))}: {verdict}; {advice}")
    return lines


def change(a: object, b: object) -> str:
    """'a -> b'; for two mappings (the kernel variables), only their entries that differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return ", ".join(f"{key} {a.get(key)!r} -> {b.get(key)!r}" for key in dict.fromkeys([*a, *b])
                         if a.get(key) != b.get(key))
    return f"{a!r} -> {b!r}"


def incompatibility(recorded: dict, portable: bool) -> str | None:
    """Why this machine cannot re-run a run that recorded `recorded` at all (another architecture, a
    device it lacks, a CPU the portable pins do not fit), as one line; None if it can."""
    machine = recorded.get("machine")
    here = cpu_info()
    if machine is not None and machine != here["machine"]:
        return (f"the run was made on {machine} and this machine is {here['machine']}: other kernels, so no "
                f"bitwise repeat; verify it on {machine}")
    kind = str(recorded.get("device", "cpu")).split(":")[0]
    if kind not in {name.split(":")[0] for name in available_devices()}:
        return (f"the run trained on {recorded.get('device')} ({recorded.get('device_name')}); verifying it needs "
                f"that kind of device, and this machine has only {', '.join(available_devices())}")
    return portable_problem(here) if portable else None


PYTORCH_INDEX = "https://download.pytorch.org/whl/"


def torch_build(version: str, cuda: str | None) -> list[str]:
    """Where the recorded torch build comes from, as requirements-file lines: a local version tag
    (2.5.1+cpu, 2.5.1+cu124) names a build on the PyTorch index; without one it is the package
    index's own build for the platform (on Linux, a CUDA build)."""
    tag = version.partition("+")[2]
    if tag:
        build = "CPU" if tag == "cpu" else f"{tag} (GPU)"
        return [f"# torch {version} is the {build} build, from the PyTorch index:",
                f"--extra-index-url {PYTORCH_INDEX}{tag}"]
    build = f"the CUDA {cuda} build" if cuda else "a CPU build"
    return [f"# torch {version} is {build}, as the package index serves it for this platform"]


def requirements_text(environment: dict, run: str, command: str) -> str:
    """A requirements file that reinstalls the stack `environment` recorded (its "packages"):
    every distribution pinned, torch's build named, the ones from no package index left as notes."""
    packages, sources = environment["packages"], environment.get("package_sources", {})
    lines = [f"# The software stack the run in {run} used, from its environment.json ({command}).",
             f"# Python {environment.get('python')} on {environment.get('platform')}: make a fresh virtual "
             "environment of that Python, then: python -m pip install -r THIS_FILE"]
    if "torch" in packages:
        lines += torch_build(packages["torch"], environment.get("cuda"))
    for name, version in packages.items():
        if name == "pip":
            continue
        if name in sources:
            lines.append(f"# {name}=={version} came from {sources[name]}, not from a package index: install it "
                         "from there (this project itself: python -m pip install -e .)")
        else:
            lines.append(f"{name}=={version}")
    return "\n".join(lines) + "\n"


def package_differences(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """'name: recorded -> here' for each distribution whose version differs, or that one side lacks."""
    return [f"{name}: {recorded.get(name, '(not installed)')} -> {now.get(name, '(not installed)')}"
            for name in sorted(recorded.keys() | now.keys(), key=str.lower) if recorded.get(name) != now.get(name)]
