"""engine/precision.py: each precision computes in its own dtype, and only fp16 scales its loss. bf16
has float32's exponent range, so its gradients do not underflow: a GradScaler would only multiply its
losses and skip steps it need not."""

from __future__ import annotations

import pytest
import torch
from repro_core.engine.precision import autocast, make_scaler

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
