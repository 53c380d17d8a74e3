"""Specifications of cuDNN's choice of convolution algorithm, on a CUDA GPU (skipped elsewhere).

cuDNN has several algorithms for one convolution; they add in different orders, so each gives
its own bits. With `torch.backends.cudnn.benchmark = True` it times them on the first batch of
each shape and keeps the fastest, and timings change from process to process. Every mode of
`configure_determinism` leaves benchmarking off, so the choice comes from cuDNN's heuristics, the
same in every process. In-process repeats cannot see this (the choice is cached per process), so
the test compares fresh processes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import PACKAGE, python_env

# Run in each fresh process: the task's model, forward, at several widths and batch sizes (each
# shape is a choice of its own), hashed. Only deterministic algorithms are allowed, whatever the
# mode, so that a difference between processes can come only from which algorithm was chosen.
CONVOLUTIONS = """
import hashlib, sys
import torch
from {package} import task
from {package}.config import Config
from {package}.utils.repro import configure_determinism, seed_everything

configure_determinism(sys.argv[1])  # the mode under test sets torch.backends.cudnn.benchmark
torch.backends.cudnn.deterministic = True
device = torch.device(sys.argv[2])
train_set, _ = task.make_datasets(Config())
digest = hashlib.sha256()
with torch.no_grad():
    for width in (4, 8, 16, 32, 64):
        seed_everything(11)
        model = task.make_model(Config(width=width), train_set).to(device).eval()
        for batch in (1, 16, 256):
            inputs = torch.stack([torch.as_tensor(train_set[i % len(train_set)][0]) for i in range(batch)])
            digest.update(model(inputs.to(device)).float().cpu().numpy().tobytes())
print(digest.hexdigest())
"""
PROCESSES = 3


def convolution_digests(mode: str, device: str) -> list[str]:
    """The digest from each of PROCESSES fresh processes, started at once (so that they also
    compete for the GPU, as runs on a shared machine do)."""
    command = [sys.executable, "-c", CONVOLUTIONS.format(package=PACKAGE), mode, device]
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=python_env()) for _ in range(PROCESSES)]
    digests = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-3000:]
        digests.append(out.strip())
    return digests


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: runs on GPU machines only")
@pytest.mark.parametrize("mode", ["strict", "warn", "off"])
def test_on_cuda_convolutions_give_the_same_bits_in_fresh_processes_in_every_mode(mode):
    digests = convolution_digests(mode, "cuda")
    assert len(set(digests)) == 1, (f"--deterministic {mode}: the same convolutions gave other bits in other "
                                    f"processes ({digests}): cuDNN chose its algorithms by timing them "
                                    "(torch.backends.cudnn.benchmark)")
