"""The optimizer (--optimizer) and the learning-rate schedule (--schedule, --warmup-steps).

Both are plain PyTorch objects whose state_dicts go into every checkpoint, so a resumed run takes
the steps that the run that never stopped took.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def make_optimizer(model: nn.Module, config, steps: int):
    """(optimizer, scheduler) for `config`, over all `steps` optimizer steps of the run."""
    if config.optimizer == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(config.momentum, 0.999),
                                      weight_decay=config.weight_decay)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                    weight_decay=config.weight_decay)
    if config.schedule == "one-cycle":
        # cycle_momentum=False: by default OneCycleLR also cycles the momentum (0.85 .. 0.95) and
        # so overrides --momentum, which then changes nothing although config.json records it.
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr, total_steps=steps,
                                                       cycle_momentum=False)
    else:
        factor = warmup_then(config.schedule, config.warmup_steps, steps)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return optimizer, schedule


def warmup_then(schedule: str, warmup: int, steps: int):
    """The factor of the peak learning rate at each step: a linear warm-up over `warmup` steps,
    then constant, or a cosine down to 0 at the last step."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return factor
