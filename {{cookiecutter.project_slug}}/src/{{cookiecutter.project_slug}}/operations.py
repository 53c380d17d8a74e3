"""The digests of every operation a run of this project depends on, computed in a fresh interpreter
for doctor --fingerprint and for the fingerprint.json of a run made with --cpu-kernels portable
(engine/fingerprint.py starts it, natively or under the portable pins). Not a command of its own.

engine/fingerprint.py digests what any project computes (NumPy's functions, torch's kernels, the
optimizers' updates); this module adds this recipe's own operations, the first batch of each split
as train.py's loaders give it and train.py's first step, so that it imports train.py and the
engine imports no recipe.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import torch

from . import task
from .config import Config
from .engine.checkpoint import TrainingState
from .engine.fingerprint import digest, kernel_fingerprints, numpy_fingerprints, optimizer_fingerprints
from .engine.loop import accumulation_windows
from .engine.optim import make_optimizer
from .engine.precision import make_scaler
from .train import evaluation_samples, first, make_loaders, run_length, steps_per_epoch, train_step
from .utils.repro import configure_determinism, seed_everything, set_thread_count, state_dict_sha256


def data_fingerprints(config: Config) -> dict[str, str]:
    """The first batch of each split, as the run's seeded loaders give it (augmentation included)."""
    seed_everything(config.seed)
    train_set, val_set = task.make_datasets(config)
    train_loader, val_loader = make_loaders(first(train_set, config.max_samples),
                                            evaluation_samples(first(val_set, config.max_samples), config), config)
    return {"data/train": digest(*next(iter(train_loader))), "data/val": digest(*next(iter(val_loader)))}


def first_step_fingerprint(config: Config) -> dict[str, str]:
    """This task's first optimizer step, as train.py takes it from the run's seed: the weights after it."""
    device = torch.device("cpu")
    seed_everything(config.seed)
    train_set, val_set = task.make_datasets(config)
    model = task.make_model(config, train_set)
    train_loader, _ = make_loaders(first(train_set, config.max_samples), first(val_set, config.max_samples), config)
    optimizer, scheduler = make_optimizer(model, config, run_length(config, steps_per_epoch(train_loader, config))[1])
    state = TrainingState(model, optimizer, scheduler, make_scaler(config.precision, device))
    model.train()
    train_loader.sampler.set_epoch(0)
    train_step(model, next(iter(accumulation_windows(train_loader, config.accumulate))), state, config, device)
    return {"task/first_step": state_dict_sha256(model.state_dict())[:16]}


def fingerprint(config: Config) -> dict[str, str]:
    """Every operation's digest, in the order a run meets them: the first that differs between two
    machines is where they part."""
    configure_determinism(config.deterministic)
    set_thread_count(config.threads)
    return {**data_fingerprints(config), **numpy_fingerprints(), **kernel_fingerprints(), **optimizer_fingerprints(),
            **first_step_fingerprint(config)}


if __name__ == "__main__":
    # A run's settings (config.json's, as JSON; none: the defaults) on the CPU, as `train --device
    # cpu` would take them: its data, its model.
    settings = Config.from_dict(json.loads(sys.argv[1]))[0] if len(sys.argv) > 1 else Config()
    operations = fingerprint(replace(settings, device="cpu"))
    print(json.dumps({"aten": torch.backends.cpu.get_cpu_capability(), "operations": operations}))
    sys.exit(0)
