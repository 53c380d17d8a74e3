"""engine/precision.py: only fp16 scales its loss. bf16 has float32's exponent range, so its
gradients do not underflow: a GradScaler would only multiply its losses and skip steps it need not."""

from __future__ import annotations

import pytest
import torch
from repro_core.engine.precision import make_scaler

CPU = torch.device("cpu")


@pytest.mark.parametrize(("precision", "scales"), [("fp16", True), ("bf16", False), ("fp32", False)])
def test_only_fp16_gets_a_loss_scale(precision: str, scales: bool) -> None:
    scaler = make_scaler(precision, CPU)
    assert scaler.is_enabled() is scales
    loss = torch.tensor(0.5)
    assert (scaler.scale(loss).item() != 0.5) is scales  # a disabled scaler passes the loss through
