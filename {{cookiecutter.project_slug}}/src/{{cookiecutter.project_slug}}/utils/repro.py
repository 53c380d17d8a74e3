"""Every reproducibility setting of a training process, in one module: the seeds, the string hash
seed, cuDNN, cuBLAS, deterministic algorithms, TF32 and the thread count, each with what it guards
against and what it costs; and the weights hash that proves two runs equal.

This file imports nothing of its project but hashseed.py: copy both (with device.py and data.py
beside them, which they need not) into any PyTorch project. Then call, in this order:

1. `restart_with_hash_seed(seed)`, first, when the script runs as a program (best before torch's
   import: hashseed.py imports no torch). Python reads PYTHONHASHSEED once, as the interpreter
   starts, so this starts it again with the variable set. The popular
   `os.environ["PYTHONHASHSEED"] = "0"` inside a script changes nothing for that script: its set
   and dict-of-string orders stay random.
2. `configure_determinism(mode)`, before anything touches the GPU: CUDA reads
   CUBLAS_WORKSPACE_CONFIG once, when it initialises (CUDA_VISIBLE_DEVICES likewise; see
   device.py).
3. `set_thread_count(n)`, before the first tensor operation.
4. `seed_everything(seed)`, right before the first random draw: building the model.
5. During training, `seed_step(seed, step)` before each step's forward pass: what the step draws
   (dropout) is then a function of (seed, step) alone, so a resumed run, or one with another number
   of loader workers, draws what the run that never stopped drew. data.py does the same for each
   sample.
6. `state_dict_sha256(model.state_dict())` at the end: equal hashes mean equal weights, bit for bit.

What this module does not do, and why: it does not set `torch.backends.cudnn.enabled = False`.
That old advice predates `torch.use_deterministic_algorithms`: with deterministic algorithms on
and benchmark off, cuDNN picks deterministic kernels, or raises for an op that has none. Switching
cuDNN off buys no extra determinism and falls back to PyTorch's slower native convolutions.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Collection, Mapping
from enum import IntEnum

import numpy as np
import torch

# The string hash seed needs no torch, and is set before torch loads: hashseed.py (copy it too).
from .hashseed import MAX_SEED, hash_seed_in_effect, restart_with_hash_seed  # noqa: F401

DETERMINISM_MODES = ("strict", "warn", "off")

# cuBLAS keeps per-stream workspaces; with the default sizes, a matrix product may split its
# reduction differently from call to call. A fixed workspace configuration makes it repeat.
# NVIDIA documents two values: ":4096:8" (8 buffers of 4 MiB, what we set) and ":16:8" (less
# memory, sometimes slower). Both are accepted when the user has set one already.
CUBLAS_WORKSPACE_CONFIG = ":4096:8"
DETERMINISTIC_CUBLAS_CONFIGS = (":4096:8", ":16:8")


def check_seed(seed: object) -> int:
    """Returns the seed as an int, or raises ValueError if it is not an integer in 0 .. 2**32-1."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in 0 .. {MAX_SEED}, not {seed!r}")
    return int(seed)


def set_thread_count(threads: int) -> None:
    """Fixes torch's intra-op threads on the CPU.

    Guards against: a reduction (a sum, a matrix product) split over one thread per core, the
    default, and added up in an order that depends on the split: other bits on a machine with
    another core count. Costs: the speed of the cores left idle. The split follows the thread
    count, not the cores, so a count above 1 repeats too, once recorded, on any machine whose CPU
    takes the same kernels (its instruction set: the research size's --cpu-kernels portable pins it).
    """
    torch.set_num_threads(threads)


def seed_everything(seed: int) -> None:
    """Seeds every global generator a training script draws from: Python, NumPy, torch (CPU, CUDA, MPS).

    Seeding makes the *first* draw repeat. It does not make kernels deterministic
    (see configure_determinism). DataLoader workers are separate processes: data.py makes
    what a dataset draws there a function of (seed, epoch, index) instead.
    """
    seed = check_seed(seed)
    # Python's `random`: user code, `random.shuffle`, and some augmentation libraries.
    random.seed(seed)
    # NumPy's legacy global generator (`np.random.rand` and friends), still used by much code.
    np.random.seed(seed)
    # torch's CPU generator: weight initialisation, dropout masks, `torch.randperm`.
    torch.manual_seed(seed)
    # Every GPU has its own generator. torch.manual_seed already seeds them; calling this by name
    # shows it. It is lazy: it does not initialise CUDA, so it is safe on a CPU-only machine.
    torch.cuda.manual_seed_all(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


class Stream(IntEnum):
    """One id per use of randomness, so that no two uses share a generator: adding a draw to one
    (a new augmentation, say) shifts nothing in another (the shuffle order)."""

    DATA = 1  # of the data seed: the example's synthetic data
    SPLIT = 2  # of the data seed: the train/validation split
    EVAL_BATCHES = 3  # of the data seed: the validation samples a research run's --eval-batches scores
    SHUFFLE = 11  # the order of each epoch
    TRAIN_SAMPLE = 12  # each training sample's augmentation
    VAL_SAMPLE = 13  # each validation sample's (normally none)
    LOADER = 14  # the base seed of the loader's workers
    STEP = 15  # dropout and any other draw of each training step


def derive_seed(*keys: int) -> int:
    """Mixes non-negative integers, such as (seed, stream), into one 64-bit seed.

    A cryptographic hash of the keys: nearby keys give unrelated seeds, and no two key tuples
    collide in practice, unlike `seed + stream`. For the keys of every sample and step, see
    keyed_seed, which is cheaper.
    """
    packed = b"".join(int(key).to_bytes(8, "little") for key in keys)
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "little")


MASK64 = 2**64 - 1


def keyed_seed(base: int, high: int, low: int) -> int:
    """A 64-bit seed for one key, (high, low) below 2**32 each, such as (epoch, index) or
    (step, micro-batch): SplitMix64's finaliser over base ^ (high << 32 | low). Both steps are
    bijections, so for one base no two keys share a seed. Cheap enough to run for every sample."""
    z = (base ^ (high << 32) ^ low) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


GLOBAL_GENERATORS = ("random", "numpy", "torch")  # Python's `random`, NumPy's `np.random`, torch's CPU generator


def seed_global_generators(seed: int, device: torch.device | None = None,
                           generators: Collection[str] = GLOBAL_GENERATORS) -> None:
    """Seeds Python's `random`, NumPy's global generator and torch's CPU generator (or only those
    named in `generators`) from one 64-bit seed, and `device`'s generator if it is a GPU: what the
    loader does before each sample, and the training loop before each step.

    Costs: each is a Mersenne Twister, whose seeding fills 624 words of state; Python's costs the
    most, then NumPy's, then torch's: a few µs in all. Not torch.manual_seed, which also visits
    every GPU and backend, at a hundred times the cost of seeding the CPU generator alone.
    """
    if "random" in generators:
        random.seed(seed)
    if "numpy" in generators:
        np.random.seed(seed & 0xFFFFFFFF)  # NumPy's legacy generator takes 32 bits
    if "torch" in generators:
        torch.default_generator.manual_seed(seed)
    if device is not None and device.type == "cuda":
        # torch.cuda.manual_seed seeds the *current* GPU's generator: GPU 0 unless set_device chose
        # another (torchrun's ranks do; one process on --device cuda:1 does not). So `device` is made
        # current while it seeds (-1, for a device without an index: the current one, left as it is).
        with torch.cuda.device(-1 if device.index is None else device.index):
            torch.cuda.manual_seed(seed)
    elif device is not None and device.type == "mps":
        torch.mps.manual_seed(seed)


def seed_step(seed: int, step: int, device: torch.device | None = None) -> None:
    """Seeds the global generators (and `device`'s) for one training step's draws, dropout's masks
    say, from (seed, step) alone: the same after a resume, with any number of loader workers,
    whatever ran before. A resumed run then needs no saved generator state to draw what the run
    that never stopped drew. Costs: one seeding of each generator per step, a few µs.
    (The key's two zeros are the micro-batch and the process: the research size keys those too,
    engine/loop.py's seed_micro_step, and draws this at micro-batch 0 on one process.)"""
    seed_global_generators(keyed_seed(derive_seed(seed, Stream.STEP, 0), step, 0), device)


def float32_precision() -> dict[str, str]:
    """How float32 matrix products and convolutions may compute on a GPU: "ieee" (full float32)
    or "tf32" (10-bit mantissa on Ampere and later GPUs); "none" means torch's default, which
    for matrix products follows torch.set_float32_matmul_precision ("highest" is ieee)."""
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # the API of torch 2.9 and later
        return {"matmul": torch.backends.cuda.matmul.fp32_precision, "conv": torch.backends.cudnn.conv.fp32_precision,
                "float32_matmul_precision": torch.get_float32_matmul_precision()}
    return {"matmul": "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee",  # older torch
            "conv": "tf32" if torch.backends.cudnn.allow_tf32 else "ieee",
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def set_float32_precision(matmul: str, conv: str) -> None:
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = matmul
        torch.backends.cudnn.conv.fp32_precision = conv
    else:
        torch.backends.cuda.matmul.allow_tf32 = matmul == "tf32"
        torch.backends.cudnn.allow_tf32 = conv == "tf32"


def tf32_allowed() -> bool:
    """Whether float32 products or convolutions may run in TF32 on a GPU that has it."""
    precision = float32_precision()
    matmul_tf32 = precision["matmul"] == "tf32" or (
        precision["matmul"] == "none" and precision["float32_matmul_precision"] != "highest")
    return matmul_tf32 or precision["conv"] == "tf32"


PYTORCH_DEFAULT_FLOAT32 = float32_precision()  # what `off` puts back (cuDNN convolutions: TF32)


def configure_determinism(mode: str) -> None:
    """Chooses between bitwise repeatable kernels and PyTorch's fastest ones.

    strict: deterministic algorithms everywhere; an op that has no deterministic implementation
            raises a RuntimeError naming it (so a result is never silently non-repeatable).
    warn:   the same, but such an op only warns and runs its non-deterministic kernel.
    off:    PyTorch's defaults. On the CPU most runs still repeat; on a GPU they may not.
    """
    if mode not in DETERMINISM_MODES:
        raise ValueError(f"determinism mode must be one of {', '.join(DETERMINISM_MODES)}, not {mode!r}")
    if mode == "off":
        if torch.are_deterministic_algorithms_enabled():
            torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.benchmark = False  # PyTorch's default too
        set_float32_precision(PYTORCH_DEFAULT_FLOAT32["matmul"], PYTORCH_DEFAULT_FLOAT32["conv"])
        return

    _require_cublas_workspace_config()
    # Guards against: ops with non-deterministic kernels (atomicAdd-based scatter and index_add,
    # some pooling and interpolation backwards on CUDA). Costs: those ops use slower deterministic
    # kernels, and the few with none raise (strict) or warn (warn).
    torch.use_deterministic_algorithms(True, warn_only=(mode == "warn"))
    # Guards against: cuDNN choosing a non-deterministic convolution algorithm. Costs: on a GPU,
    # some convolutions run a slower algorithm than the fastest one.
    torch.backends.cudnn.deterministic = True
    # Guards against: cuDNN timing several algorithms on the first batch and keeping the fastest,
    # which can differ from run to run. Costs: the autotuned speed-up for fixed input shapes.
    torch.backends.cudnn.benchmark = False
    # Guards against: torch.empty() and friends returning whatever bytes were in memory, which
    # would leak into results that read them. Costs: a fill of each new uninitialised tensor.
    torch.utils.deterministic.fill_uninitialized_memory = True
    # Guards against: TF32, which on Ampere and later GPUs computes float32 products and
    # convolutions with a 10-bit mantissa; cuDNN convolutions use it by default, and results then
    # change with the GPU model. TF32 is deterministic, but the precision policy should be a
    # recorded choice, not a default that varies by GPU. Costs: on those GPUs, float32 matrix
    # work runs at full float32 speed instead of TF32's (several times slower for big products;
    # bf16 autocast, chosen as a recorded setting, is the way to go faster).
    set_float32_precision("ieee", "ieee")


def _require_cublas_workspace_config() -> None:
    current = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if current in DETERMINISTIC_CUBLAS_CONFIGS:
        return
    if torch.cuda.is_initialized():
        # Setting it now would change os.environ but not cuBLAS, which has already read it.
        raise RuntimeError(
            f"CUBLAS_WORKSPACE_CONFIG is {current!r} and CUDA is already initialised, so it can no "
            "longer take effect. Call configure_determinism() first thing in main(), before any "
            f"tensor goes to the GPU, or start Python with CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE_CONFIG}."
        )
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG


def determinism_flags() -> dict[str, object]:
    """The settings in effect now, as recorded in each run's environment.json."""
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_enabled": torch.backends.cudnn.enabled,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "fill_uninitialized_memory": torch.utils.deterministic.fill_uninitialized_memory,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "float32_precision": float32_precision(),
        "tf32_allowed": tf32_allowed(),
    }


def state_dict_sha256(state_dict: Mapping[str, torch.Tensor]) -> str:
    """sha256 over every tensor of a state_dict in key order: names, dtypes, shapes and raw bytes.

    Two models with this hash equal are equal bit for bit; a tolerance-based comparison
    (torch.allclose) would hide exactly the drift that reproducibility is about.
    """
    digest = hashlib.sha256()
    for name, tensor in state_dict.items():
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
