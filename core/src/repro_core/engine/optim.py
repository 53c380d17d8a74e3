"""The optimizer (--optimizer, --beta2, --weight-decay-on) and the learning-rate schedule
(--schedule, --warmup-steps, --min-lr, --decay-steps).

Both are plain PyTorch objects whose state_dicts go into every checkpoint, so a resumed run takes
the steps that the run that never stopped took.

What each schedule gives step s (counted from 0, the first optimizer step; `lr` is --lr):
- cosine: lr * (s + 1) / (warmup + 1) while s < warmup (--warmup-steps); then a half cosine from
  lr down to --min-lr, which step `end` takes and every later step keeps. `end` is --decay-steps,
  or (0) the run's last step. This is nanoGPT's get_lr(it) with lr_decay_iters = end.
- constant: the same warm-up, then lr.
- one-cycle: torch's OneCycleLR: lr / 25 at the first step, up to lr over the first 30% of the
  steps, then a cosine down to lr / 25 / 10^4 at the last step.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# Where weight decay does not belong (--weight-decay-on weights): shrinking a bias or a norm's
# scale toward 0 fights what they are for, and an embedding row is pulled only when its token
# appears, so decay hits rare tokens hardest. minGPT and nanoGPT's recipes exempt them.
NO_DECAY_MODULES = (nn.Embedding, nn.EmbeddingBag, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm,
                    nn.modules.batchnorm._NormBase, nn.RMSNorm)


def parameter_groups(model: nn.Module, weight_decay: float, decay_on: str) -> list[dict]:
    """The optimizer's parameter groups. `decay_on` "all": one group, every parameter decays.
    "weights": biases, every parameter of fewer than 2 dimensions (a scale or gain: the norms a task
    defines itself, such as nanoGPT's `class LayerNorm(nn.Module)`, which no class list can know;
    nanoGPT's own rule is `p.dim() >= 2` decays) and the parameters of embeddings and of torch's
    norms (NO_DECAY_MODULES) decay by 0, everything else by `weight_decay`. A parameter shared by two
    modules (an embedding tied to the output layer) is exempt if either exempts it, listed once."""
    if decay_on == "all":
        return [{"params": list(model.parameters()), "weight_decay": weight_decay}]
    exempt = set()
    for module in model.modules():
        for name, parameter in module.named_parameters(recurse=False):
            if isinstance(module, NO_DECAY_MODULES) or name.endswith("bias") or parameter.dim() < 2:
                exempt.add(id(parameter))
    parameters = list(model.parameters())  # each shared parameter once, in the model's order
    return [{"params": [p for p in parameters if id(p) not in exempt], "weight_decay": weight_decay},
            {"params": [p for p in parameters if id(p) in exempt], "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, config, steps: int, groups: list[dict] | None = None):
    """(optimizer, scheduler) for `config`, over all `steps` optimizer steps of the run. `groups`:
    the task's own parameter groups (task.parameter_groups), used as given."""
    if groups is None:
        groups = parameter_groups(model, config.weight_decay, config.weight_decay_on)
    if config.optimizer == "adamw":
        optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(config.momentum, config.beta2),
                                      weight_decay=config.weight_decay)
    else:
        optimizer = torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum,
                                    weight_decay=config.weight_decay)
    if config.schedule == "one-cycle":
        # cycle_momentum=False: by default OneCycleLR also cycles the momentum (0.85 .. 0.95) and
        # so overrides --momentum, which then changes nothing although config.json records it.
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr, total_steps=steps,
                                                       cycle_momentum=False)
    else:
        end = config.decay_steps or steps - 1
        factor = warmup_then(config.schedule, config.warmup_steps, end, config.min_lr / config.lr)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return optimizer, schedule


def warmup_then(schedule: str, warmup: int, end: int, floor: float = 0.0):
    """The factor of the peak learning rate at step s (0 the first): a linear warm-up over
    `warmup` steps, then constant (1), or a cosine down to `floor` at step `end`, kept after it."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if schedule == "constant":
            return 1.0
        if step >= end:
            return floor
        progress = (step - warmup) / (end - warmup)
        return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - floor)
    return factor
