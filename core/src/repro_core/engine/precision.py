"""Mixed precision (--precision) and torch.compile (--compile), set up so that runs still repeat.

- bf16 and fp16 run the forward pass and the loss under `torch.autocast` for the device in use;
  evaluation uses the same autocast. fp16 adds a `torch.amp.GradScaler`: fp16 gradients underflow
  without a loss scale. The scaler's state (its current scale, how long since it last grew) is
  part of every checkpoint: a resumed fp16 run that restarted from the default scale (65536)
  would take other steps than the run that never stopped, and could diverge.
- --compile wraps the model in `torch.compile` with inductor's deterministic mode on (no
  autotuning, no benchmarking of kernels), random ops that fall back to eager's generator (so
  dropout draws the numbers eager draws), and a compile cache private to the process, so that
  one run's compiled kernels or tuning never carry into another's.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

PRECISIONS = ("fp32", "bf16", "fp16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """Autocast to `precision` on `device`; does nothing for fp32."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


def make_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """A GradScaler for fp16; a disabled one (it passes everything through) otherwise."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def precision_problem(precision: str, device: torch.device) -> str | None:
    """Why `device` cannot train in `precision`, as one line; None if it can. Runs a tiny matrix
    product under autocast there (on a GPU, after configure_determinism: it starts CUDA)."""
    if precision == "fp32":
        return None
    if device.type == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        return f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16 support; try fp16 or fp32"
    try:
        x = torch.ones(2, 2, device=device)
        with autocast(precision, device):
            product = x @ x
        if product.dtype != DTYPES[precision]:
            raise RuntimeError(f"autocast gave {product.dtype}")
        make_scaler(precision, device)
    except (RuntimeError, ValueError, TypeError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return f"--precision {precision} is not available on {device} ({reason}); try --precision fp32"
    return None


def compile_problem(device: torch.device) -> str | None:
    """Why torch.compile cannot work here, as one line; None if it can be tried."""
    if device.type == "cpu":
        compilers = [os.environ.get("CXX"), "g++", "c++", "clang++"]
        if not any(shutil.which(name) for name in compilers if name):
            return ("--compile on the CPU needs a C++ compiler (g++ or clang++) on PATH; install one or leave "
                    "out --compile")
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "--compile on CUDA needs triton (it comes with the CUDA wheels of torch); leave out --compile"
    return None


def compile_model(model: nn.Module) -> nn.Module:
    """`torch.compile(model)`, set up to repeat bit for bit (see the module's docstring)."""
    import torch._inductor.config as inductor

    inductor.deterministic = True  # no autotuning and no benchmarking of kernels to pick the fastest
    inductor.fallback_random = True  # dropout and friends draw from eager's generator, as eager does
    inductor.fx_graph_cache = False  # nothing compiled by another run is reused...
    inductor.autotune_local_cache = False
    cache = tempfile.mkdtemp(prefix="inductor-")  # ...and what this one writes is its own
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    return torch.compile(model)


def compile_failure(error: BaseException) -> str | None:
    """One line for an error raised while torch.compile compiled; None for other errors."""
    if type(error).__module__.startswith(("torch._dynamo", "torch._inductor")):
        lines = str(error).strip().splitlines() or [type(error).__name__]
        # BackendCompilerFailed, dynamo's wrapper of a backend's error, names the cause on its second line
        reason = " ".join(lines[:2] if lines[0].endswith(" raised:") else lines[:1])[:300]
        return f"--compile failed: {type(error).__name__}: {reason}; leave out --compile to train without it"
    return None
