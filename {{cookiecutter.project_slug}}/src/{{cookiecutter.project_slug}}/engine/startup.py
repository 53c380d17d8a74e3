"""What the training process needs in its environment before torch loads. Standard library only, on
purpose: it runs before torch is imported.

Two kinds of setting are read once, when the process starts, and never again:

- PYTHONHASHSEED. Python salts `hash()` of str and bytes with a random value chosen when the
  interpreter starts, so iterating a set of strings gives another order in each process. The
  popular `os.environ["PYTHONHASHSEED"] = "0"` inside a script changes nothing for that script.
- The CPU kernel paths (--cpu-kernels portable). ATen picks its vectorised kernels by the CPU's
  instruction sets (AVX-512, AVX2 or none), oneDNN compiles its convolutions for the best ISA it
  finds, MKL dispatches its matrix products likewise; each sums in another order, so the same run
  gives other bits on a CPU with other instruction sets; NumPy picks its functions' SIMD code
  likewise. Each library reads its variable once, when it loads or first calls it.

The only way to set them for this process is to start the interpreter again with them set.
`relaunch_with_run_environment` does that through utils/hashseed.py's `restart_with`, the one
restart of both sizes (os.execv: the same process id, so torchrun and job schedulers keep tracking
it; the same arguments; the variables added). It runs before torch is imported, so the relaunch
costs one bare interpreter start, not a second import of torch.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import warnings
from pathlib import Path

from ..utils.hashseed import initial_environment, missing_from_environment, restart_with  # standard library only

try:  # Python 3.11 and later; on 3.10 a .toml --config is refused in one line (read_settings_file)
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    tomllib = None

CPU_KERNEL_MODES = ("native", "portable")
# --cpu-kernels portable: every library's CPU code path pinned to AVX2 (with FMA), which x86-64 CPUs
# have had since Intel's Haswell (2013) and AMD's Excavator (2015), so that a laptop with AVX-512
# computes what a CI runner with AVX2 computes. Each one was found by experiment to change the
# example's weights on an AVX-512 machine (docs/another-machine.md). Costs: the AVX-512 and AMX
# speed-ups on the CPUs that have them (benchmarks/portable.py measures it).
PORTABLE_CPU_KERNELS = {
    # ATen's own vectorised kernels (elementwise ops, reductions, softmax, the optimizers' updates).
    "ATEN_CPU_CAPABILITY": "avx2",
    # oneDNN (convolutions and some matrix products) JIT-compiles for the ISA it may use.
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    # MKL (the BLAS: linear layers' matrix products): the instructions its dispatcher may use...
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    # ...and its Conditional Numerical Reproducibility branch: fixed cache sizes, deterministic
    # reductions and static scheduling, so that Intel CPUs with AVX2 give the same bits. Intel
    # documents it for Intel CPUs only: on others MKL falls back to its usual dispatch.
    "MKL_CBWR": "AVX2",
    # NumPy's own SIMD dispatch (exp, log, sin and the like, in a task's data or augmentation): its
    # AVX-512 code paths off, AVX2 kept. Named in both NumPy spellings, 2.4's X86_V4 and the
    # AVX512* of 1.x to 2.3: NumPy skips a name its version or this CPU lacks, with an ImportWarning
    # (hidden by default; quietened below for `-W error`). With it NumPy 1.26, 2.2 and 2.4 give the
    # same exp and log on an AVX-512 CPU, as on an AVX2 one (docs/another-machine.md).
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL "
                                "AVX512_ICL AVX512_SPR",
}
CPU_KERNEL_VARIABLES = tuple(PORTABLE_CPU_KERNELS)
X86_64 = ("x86_64", "amd64")
# What ATen asks of a CPU before it picks its AVX2 kernels; a variable that forces them on a CPU
# without these would stop the process on its first illegal instruction.
PORTABLE_NEEDS = ("avx2", "fma")


def hash_seed_for(seed: int) -> str:
    """The PYTHONHASHSEED for a run: the run's seed itself (both range over 0 .. 2**32-1)."""
    return str(seed)


def cpu_kernel_variables() -> dict[str, str | None]:
    """The kernel variables this process started with: what the libraries read (a later change to
    os.environ reaches none of them)."""
    started_with = initial_environment()
    source = os.environ if started_with is None else started_with
    return {name: source.get(name) for name in CPU_KERNEL_VARIABLES}


def cpu_info() -> dict:
    """This CPU as the operating system describes it: the architecture, the model and its
    instruction-set flags (lower case; None where the system does not say)."""
    machine = platform.machine().lower()
    model, flags = platform.processor() or None, None
    try:
        if sys.platform.startswith("linux"):
            model, flags = linux_cpu(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
        elif sys.platform == "darwin":
            model = sysctl("machdep.cpu.brand_string") or model
            flags = set(" ".join(filter(None, (sysctl("machdep.cpu.features"),
                                               sysctl("machdep.cpu.leaf7_features")))).lower().split()) or None
    except OSError:
        pass
    return {"machine": machine, "model": model, "flags": flags}


def linux_cpu(cpuinfo: str) -> tuple[str | None, set[str] | None]:
    """(model, flags) from /proc/cpuinfo's first processor: x86 says `model name` and `flags`, ARM
    `Features` (and no model name)."""
    fields = {}
    for line in cpuinfo.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags", fields.get("Features"))
    return fields.get("model name") or fields.get("Model") or None, set(flags.split()) if flags is not None else None


def sysctl(name: str) -> str | None:
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def portable_problem(cpu: dict | None = None) -> str | None:
    """Why --cpu-kernels portable cannot run on this CPU, as one sentence, or None."""
    cpu = cpu or cpu_info()
    if cpu["machine"] not in X86_64:
        return (f"--cpu-kernels portable pins x86-64 kernel paths, and this CPU is {cpu['machine']}: there is no "
                "such pin here (use --cpu-kernels native; runs repeat on machines of one kind)")
    if cpu["flags"] is None:
        return "--cpu-kernels portable: cannot tell whether this CPU has AVX2 and FMA (the system does not say)"
    missing = [flag for flag in PORTABLE_NEEDS if flag not in cpu["flags"]]
    if missing:
        return (f"--cpu-kernels portable needs a CPU with AVX2 and FMA; this one ({cpu['model']}) lacks "
                f"{', '.join(missing)}: use --cpu-kernels native")
    return None


def flag_value(argv: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in argv, the last one where the flag is typed
    twice (argparse keeps the last: `--seed 3 --seed 5` trains seed 5, so its hash seed is 5's),
    or None. A plain scan, not a parser: a flag with no value, or any other mistake, is left for
    train's own parser to report."""
    value = None
    for position, arg in enumerate(argv):
        if arg == name and position + 1 < len(argv):
            value = argv[position + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def read_settings_file(path: Path) -> dict:
    """`--config FILE`: the table of settings that a .toml or .json file holds (a run's own
    config.json is one), names with dashes read as with underscores. ValueError, in one line, for
    a file that cannot be read or holds no such table; what each setting may be is the project's."""
    if path.suffix not in (".toml", ".json"):
        raise ValueError("is neither a .toml nor a .json file")
    if path.suffix == ".toml" and tomllib is None:
        raise ValueError("is TOML, which Python reads from 3.11 on (tomllib): give a .json file on this one")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot be read ({getattr(error, 'strerror', None) or error})") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except ValueError as error:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"is not valid {path.suffix[1:].upper()}: {error}") from None
    if not isinstance(data, dict):
        raise ValueError("does not hold a table of settings (name = value)")
    return {str(name).replace("-", "_"): value for name, value in data.items()}


def setting_from_command_line(argv: list[str], name: str, default: str, default_seed: int) -> str:
    """A setting as text, as train will use it: `--name` if typed; else the value of the file that
    `--config FILE` names; for --resume without either, the value recorded in the run folder's
    config.json (--out, or train's default, runs/seed<SEED> of the seed typed or in the file); else
    the default."""
    typed = flag_value(argv, "--" + name.replace("_", "-"))
    if typed is not None:
        return typed
    config_file = flag_value(argv, "--config")
    if config_file is not None:
        try:
            value = read_settings_file(Path(config_file)).get(name)
        except ValueError:
            value = None  # train reports the file in its own words
        if value is not None:
            return str(value)
    if "--resume" in argv:
        out = flag_value(argv, "--out")
        # The seed that names train's default folder: as typed or in the file (not the folder's own)
        seed = default_seed if name == "seed" else setting_from_command_line(
            [arg for arg in argv if arg != "--resume"], "seed", str(default_seed), default_seed)
        folder = Path(out) if out else Path("runs") / f"seed{seed}"
        try:
            return str(json.loads((folder / "config.json").read_text(encoding="utf-8"))[name])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # train reports a missing or broken run folder in its own words
    return default


def seed_from_command_line(argv: list[str], default_seed: int) -> str:
    """The run's seed as text (see setting_from_command_line)."""
    return setting_from_command_line(argv, "seed", str(default_seed), default_seed)


def run_environment(argv: list[str], default_seed: int) -> dict[str, str]:
    """The variables the training process needs before torch loads: PYTHONHASHSEED from the seed, and
    the kernel pins under --cpu-kernels portable. A value train's parser will refuse (a bad seed or
    mode), or a CPU the pins do not fit, adds nothing: train then says why in one line."""
    wanted = {}
    seed_text = seed_from_command_line(argv, default_seed)
    # repro.MAX_SEED (no torch import here); ASCII, since "²".isdigit() is True and int("²") raises
    if seed_text.isascii() and seed_text.isdigit() and int(seed_text) <= 2**32 - 1:
        wanted["PYTHONHASHSEED"] = hash_seed_for(int(seed_text))
    if setting_from_command_line(argv, "cpu_kernels", "native", default_seed) == "portable" \
            and portable_problem() is None:
        wanted.update(PORTABLE_CPU_KERNELS)
    return wanted


def started_as_module(module: str) -> bool:
    """Whether this interpreter was started as `python [options] -m MODULE ...` (torchrun starts
    its processes so too)."""
    argv = getattr(sys, "orig_argv", [])
    position = 1
    while position < len(argv):
        arg = argv[position]
        if arg == "-m":
            return position + 1 < len(argv) and argv[position + 1] == module
        if arg.startswith("-m"):
            return arg[2:] == module
        if arg in ("-W", "-X"):  # options whose value is the next word
            position += 1
        elif not arg.startswith("-") or arg == "-c":
            return False
        position += 1
    return False


def quieten_numpys_pin_warning() -> None:
    """NumPy warns, as it loads, of each name in the portable NPY_DISABLE_CPU_FEATURES that its
    version or this CPU does not dispatch: expected (the list names every spelling), so not shown,
    and not an error under `python -W error`."""
    if os.environ.get("NPY_DISABLE_CPU_FEATURES") == PORTABLE_CPU_KERNELS["NPY_DISABLE_CPU_FEATURES"]:
        warnings.filterwarnings("ignore", message="During parsing environment variable: 'NPY_DISABLE_CPU_FEATURES'",
                                category=ImportWarning)


# What a training run needs of a POSIX system (Linux, macOS), and Windows lacks.
POSIX_ONLY = ("the run folder's one-writer lock (flock), the restart that fixes PYTHONHASHSEED in the same "
              "process (execv) and a training child that dies with its parent")


def platform_problem() -> str | None:
    """Why this system cannot train, in one sentence; None on a POSIX system."""
    if os.name == "posix":
        return None
    return f"training needs Linux or macOS (on Windows, run it in WSL): {POSIX_ONLY} are POSIX-only"


def relaunch_with_run_environment(argv: list[str], default_seed: int, prog: str = "train") -> None:
    """Re-executes this interpreter with the variables of `run_environment`, unless all are in effect.

    Returns when nothing needs doing. Afterwards, until training installs its own handlers, Ctrl-C
    exits quietly (nothing to save yet). On a system that is not POSIX, refuses in one line
    (`prog: error: ...`) and exits 2, before anything else.
    """
    problem = platform_problem()
    if problem is not None:
        print(f"{prog}: error: {problem}", file=sys.stderr)
        sys.exit(2)
    signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(128 + signum))
    restart_with(missing_from_environment(run_environment(argv, default_seed)))  # returns when none is missing
    quieten_numpys_pin_warning()
