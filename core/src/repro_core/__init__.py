"""repro_core: what makes a PyTorch training run repeat bit for bit, as one plain package.

The names most projects need are here at the top; each lives in a module whose docstring says
what it guards against and what it costs:

    from repro_core import seed_everything, configure_determinism, make_loader, state_dict_sha256

    configure_determinism("strict")          # before anything touches the GPU
    seed_everything(42)                      # before building the model
    loader = make_loader(dataset, batch_size=32, seed=42, train=True, num_workers=2)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)      # each epoch its own order, a function of (seed, epoch)
        for step, batch in enumerate(loader):
            seed_step(42, global_step)       # dropout keyed by (seed, step), not by what ran before
            ...
    print(state_dict_sha256(model.state_dict()))

Layout (the same modules, byte for byte, are vendored into the projects that repro-template bakes):

    utils/   repro.py (seeds, kernels, threads, hash seed, weights hash), device.py, data.py
             (the keyed loader): what a student reads first, and the teaching project's utils/
    engine/  the run machinery that needs no project: atomic files, the run folder and its lock,
             checkpoints and their checks, precision, distributed, the loop's windows, statistics

The core is one-way: no module of it imports a project (its recipe, config, task or package).
What a module needs of a project is passed in. Importing this package imports nothing heavy: the
names below load their module when first used, so `repro_core.engine.startup` can still run
before torch is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module (below this package) that defines it.
_EXPORTS = {
    "restart_with_hash_seed": "utils.hashseed",
    "configure_determinism": "utils.repro",
    "set_thread_count": "utils.repro",
    "seed_everything": "utils.repro",
    "seed_step": "utils.repro",
    "derive_seed": "utils.repro",
    "check_seed": "utils.repro",
    "determinism_flags": "utils.repro",
    "hash_seed_in_effect": "utils.hashseed",
    "state_dict_sha256": "utils.repro",
    "select_device": "utils.device",
    "to_device": "utils.device",
    "make_loader": "utils.data",
    "EpochSampler": "utils.data",
    "KeyedRandomness": "utils.data",
    "atomic_write": "engine.files",
    "write_json": "engine.files",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Loads the module that defines `name` on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'repro_core' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
