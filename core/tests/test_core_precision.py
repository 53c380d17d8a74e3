"""engine/precision.py: each precision computes in its own dtype, and only fp16 scales its loss. bf16
has float32's exponent range, so its gradients do not underflow: a GradScaler would only multiply its
losses and skip steps it need not. A model compiled by compile_model draws dropout's masks from
eager's generator."""

from __future__ import annotations

import os

import pytest
import torch
from core_helpers import run_python
from repro_core.engine import precision
from repro_core.engine.precision import autocast, compile_failure, compile_problem, make_scaler, precision_problem

CPU = torch.device("cpu")


@pytest.mark.parametrize(("precision", "scales"), [("fp16", True), ("bf16", False), ("fp32", False)])
def test_only_fp16_gets_a_loss_scale(precision: str, scales: bool) -> None:
    scaler = make_scaler(precision, CPU)
    assert scaler.is_enabled() is scales
    loss = torch.tensor(0.5)
    assert (scaler.scale(loss).item() != 0.5) is scales  # a disabled scaler passes the loss through


@pytest.mark.parametrize(("precision", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16),
                                                  ("fp32", torch.float32)])
def test_each_precision_computes_a_matrix_product_in_its_own_dtype(precision: str, dtype: torch.dtype) -> None:
    """On the CPU too (torch autocasts there to either half type): fp16 and bf16 round differently,
    and a run recorded as one must not compute in the other."""
    with autocast(precision, CPU):
        assert torch.nn.Linear(3, 2)(torch.ones(1, 3)).dtype == dtype


def test_a_gpu_without_bfloat16_refuses_bf16_alone_in_one_line_and_takes_fp16(monkeypatch) -> None:
    """A V100 or a T4 has no bfloat16: --precision bf16 is refused there, in one line that names the
    GPU and sends the user to fp16, which that GPU (and its GradScaler) is there for, and which must
    not be refused with it. Stand-ins: the GPU's answers (this machine may have none), and its tiny
    product under autocast computed on the CPU. The control: a GPU with bfloat16 takes bf16."""
    real_ones, real_autocast, real_scaler = torch.ones, precision.autocast, precision.make_scaler
    cpu = torch.device("cpu")
    has_bf16 = [False]
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: has_bf16[0])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    monkeypatch.setattr(torch, "ones", lambda *shape, device=None, **kwargs: real_ones(*shape, **kwargs))
    monkeypatch.setattr(precision, "autocast", lambda wanted, device: real_autocast(wanted, cpu))
    monkeypatch.setattr(precision, "make_scaler", lambda wanted, device: real_scaler(wanted, cpu))
    gpu = torch.device("cuda", 0)
    assert precision_problem("bf16", gpu) == ("--precision bf16: Tesla V100-SXM2-16GB has no bfloat16 support; "
                                              "try fp16 or fp32")
    assert precision_problem("fp16", gpu) is None and precision_problem("fp32", gpu) is None
    has_bf16[0] = True
    assert precision_problem("bf16", gpu) is None


@pytest.mark.parametrize("wanted", ["bf16", "fp16"])
def test_an_autocast_that_turns_itself_off_is_refused_in_one_line_naming_the_dtype_it_gave(wanted: str,
                                                                                        monkeypatch) -> None:
    """Where a device lacks a dtype, torch's autocast does not raise: it warns and turns itself off,
    so a run recorded as bf16 or fp16 would train in float32. The check's product is then float32,
    and the precision is refused in one line. Stand-in: autocast to a dtype the CPU's autocast
    lacks, which is torch's own autocast turning itself off, on this machine. The control: the
    CPU's real autocast takes both."""
    assert precision_problem(wanted, CPU) is None
    monkeypatch.setattr(precision, "autocast", lambda wanted, device: torch.autocast("cpu", dtype=torch.float64))
    with pytest.warns(UserWarning, match="Disabling autocast"):
        problem = precision_problem(wanted, CPU)
    assert problem == (f"--precision {wanted} is not available on cpu (autocast gave torch.float32); "
                       "try --precision fp32")


def test_compiling_on_the_cpu_takes_the_compiler_cxx_names_where_no_other_is_on_path(tmp_path, monkeypatch) -> None:
    """Inductor builds its kernels with the compiler CXX names (a module system's, a toolchain in
    /opt): with it, --compile can be tried though no g++, c++ or clang++ is on PATH; without it,
    --compile is refused in one line, before the run starts."""
    compiler = tmp_path / "toolchain" / "my-g++"
    compiler.parent.mkdir()
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder with no compiler in it
    monkeypatch.setenv("CXX", str(compiler))
    assert compile_problem(CPU) is None
    monkeypatch.delenv("CXX")
    assert compile_problem(CPU) == ("--compile on the CPU needs a C++ compiler (g++ or clang++) on PATH; install one "
                                    "or leave out --compile")


def compile_error(kind: str) -> Exception:
    """An error of each kind torch.compile raises as it compiles: dynamo's, as it traces, and
    inductor's, as it generates and builds kernels (a C++ compiler that fails on one)."""
    from torch._dynamo.exc import BackendCompilerFailed, TorchRuntimeError
    from torch._inductor.exc import CppCompileError, InductorError

    return {"dynamo": TorchRuntimeError("dynamo cannot trace this"),
            "inductor": InductorError(RuntimeError("C++ compile error: bad kernel"), None),
            "inductor's C++ build": CppCompileError(["g++", "kernel.cpp"], "error: boom"),
            "a backend's": BackendCompilerFailed(compile_error, RuntimeError("cannot build this graph"), None)}[kind]


@pytest.mark.parametrize(("kind", "said"), [("dynamo", "TorchRuntimeError: dynamo cannot trace this"),
                                            ("inductor", "InductorError: RuntimeError: C++ compile error: bad kernel"),
                                            ("inductor's C++ build", "CppCompileError: C++ compile error"),
                                            ("a backend's", "BackendCompilerFailed: backend='compile_error' raised: "
                                                            "RuntimeError: cannot build this graph")])
def test_an_error_of_compiling_is_said_in_one_line_whichever_part_of_torch_compile_raised_it(kind, said) -> None:
    """Dynamo's and inductor's errors alike: the first line of what they say (with the cause, where
    that line only names the backend), and what to do."""
    assert compile_failure(compile_error(kind)) == f"--compile failed: {said}; leave out --compile to train without it"


@pytest.mark.parametrize("error", [RuntimeError("C++ compile error"), ValueError("x"), KeyboardInterrupt()])
def test_any_other_error_is_not_taken_for_one_of_compiling(error) -> None:
    """Even one that says the same words: what raised it decides, so that a bug of the model keeps
    its traceback."""
    assert compile_failure(error) is None


# A fresh interpreter: compile_model sets inductor's configuration and cache folder for the process.
COMPILED_DROPOUT = """
import torch
import torch._inductor.config as inductor
from torch import nn
from repro_core.engine.precision import compile_model

def masks(model):  # dropout's output on ones, the seed set just before, as a step keyed by seed_step is
    torch.manual_seed(0)
    return model(torch.ones(4, 8))

eager = masks(nn.Dropout(0.5))
print(torch.equal(masks(compile_model(nn.Dropout(0.5))), eager))
inductor.fallback_random = False  # the control: inductor's own generator (Philox), torch.compile's default
print(torch.equal(masks(torch.compile(nn.Sequential(nn.Dropout(0.5)))), eager))
"""


def test_compile_model_keeps_its_cache_private_even_where_the_user_exported_one(tmp_path) -> None:
    """Nothing another run compiled is reused: a TORCHINDUCTOR_CACHE_DIR exported in the shell (a
    shared cache, which would hand this run kernels compiled for other settings) is replaced by a
    folder of this process's own, which goes when the process ends (runs would otherwise leave one
    in the temporary folder each). torch.compile compiles at the first call: none is made here."""
    said = run_python("""
        import os
        from torch import nn
        from repro_core.engine.precision import compile_model
        compile_model(nn.Linear(2, 2))
        print(os.environ["TORCHINDUCTOR_CACHE_DIR"], os.path.isdir(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
    """, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "shared")}).stdout.split()
    cache, existed = said
    assert cache != str(tmp_path / "shared") and os.path.basename(cache).startswith("inductor-"), said
    assert existed == "True" and not os.path.exists(cache), said


@pytest.mark.skipif(compile_problem(CPU) is not None, reason=f"{compile_problem(CPU)}")
def test_a_compiled_model_draws_the_dropout_masks_of_the_eager_one_from_one_seed() -> None:
    """--compile keeps a run's randomness that of the eager run: the masks are drawn from torch's
    generator, which seed_step keys by (seed, step), not from inductor's own, seeded once; the
    control, a model compiled with inductor's own generator, draws other masks."""
    assert run_python(COMPILED_DROPOUT).stdout.split() == ["True", "False"]
