"""Specifications of --parallel fsdp under --precision bf16: FSDP's own mixed-precision policy
casts the gathered weights, and modules with float buffers (BatchNorm) keep float32 weights.

Selected with `pytest -m slow`, with the other mixed-precision runs (two torchrun launches).
"""

from __future__ import annotations

import sys

import pytest
import torch

from {{ cookiecutter.project_slug }}.engine.distributed import holds_float_buffers

from conftest import FAST, PACKAGE, once, precision_problem, read_run, start, value_of

pytestmark = pytest.mark.slow

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")


def bf16_runs(root):
    processes = {name: start([*TORCHRUN, "-m", f"{PACKAGE}.train", *FAST, "--seed", "7", "--parallel", "fsdp",
                              "--precision", precision, "--out", str(root / name)], root / f"{name}.log")
                 for name, precision in (("bf16", "bf16"), ("bf16_again", "bf16"), ("fp32", "fp32"))}
    for name, process in processes.items():
        assert process.wait() == 0, f"{name}:\n{process.stderr[-3000:]}"
    return {name: read_run(root / name) for name in processes}


@pytest.fixture(scope="module")
def runs_or_failure(tmp_path_factory):
    if precision_problem("bf16"):
        return None  # the tests skip, saying why
    return once(lambda: bf16_runs(tmp_path_factory.mktemp("fsdp_bf16")))


@pytest.fixture
def runs(runs_or_failure, request):
    if precision_problem("bf16"):  # no bf16 kernel on this CPU for an op of the task's model
        pytest.skip(precision_problem("bf16"))
    return value_of(runs_or_failure, request)


def test_two_fsdp_bf16_launches_with_one_seed_give_identical_weights(runs):
    assert runs["bf16"].config["precision"] == "bf16" and runs["bf16"].config["parallel"] == "fsdp"
    assert runs["bf16"].metrics == runs["bf16_again"].metrics
    assert runs["bf16"].weights == runs["bf16_again"].weights


def test_fsdp_bf16_computes_in_bfloat16(runs):
    assert runs["bf16"].weights != runs["fp32"].weights


def test_the_modules_that_keep_float32_weights_under_fsdp_are_those_with_float_buffers():
    assert holds_float_buffers(torch.nn.BatchNorm2d(4))
    assert not holds_float_buffers(torch.nn.BatchNorm2d(4, affine=False))  # buffers, no weights to cast
    assert not holds_float_buffers(torch.nn.Linear(4, 4)) and not holds_float_buffers(torch.nn.Sequential(
        torch.nn.BatchNorm1d(4)))  # its own buffers and weights only, not its children's
