"""Loaders whose every random draw is a function of the config, with any number of workers.

You do not need to edit this file: put your data in data.py (`make_datasets`) and it applies.

A dataset written the usual way draws its augmentation from the global generators (Python's
`random`, NumPy's `np.random`, torch's `torch.rand`), as torchvision and albumentations
transforms do. In DataLoader workers those generators are per-process copies, seeded from the
loader's base seed: what sample i gets then depends on which worker loaded it and what that worker
loaded before, so the result changes with `--num-workers`. PyTorch's documented recipe (a seeded
`generator` plus a `worker_init_fn`) repeats a run only with the same worker count.

Here, three pieces make the data stream a function of (seed, epoch, index) alone:
- `EpochSampler`: the order of an epoch is a function of (seed, epoch). It runs in the main
  process and hands out (epoch, index) keys, so even persistent workers, which keep an old copy
  of the dataset, always know the current epoch.
- `KeyedRandomness`: before it fetches sample `index`, it seeds the three global generators with
  a hash of (seed, epoch, index). Whatever the dataset draws is then the same in any worker,
  after any other sample, and after a resume. In the main process (0 workers) it puts the
  generators back afterwards, so the training loop's own draws (dropout) are not disturbed.
- the loader's own generator is seeded, so making an iterator draws nothing from torch's
  global generator.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from .repro import derive_seed

# Each use of randomness gets its own stream id, so that no two uses share a generator: adding a
# draw to one (say, a new augmentation) shifts nothing in another (say, the shuffle order).
SHUFFLE_STREAM, TRAIN_SAMPLE_STREAM, VAL_SAMPLE_STREAM, LOADER_STREAM = 11, 12, 13, 14


class EpochSampler(Sampler):
    """Yields (epoch, index) keys in an order that is a function of (seed, epoch) alone.

    Call set_epoch(e) before each epoch. `start` skips this rank's first samples of the epoch, so
    that a resumed run continues exactly where it stopped. Under torchrun, rank r of w takes every
    w-th sample of the one shared order (r, r + w, ...). With `pad`, the order is first extended by
    its own beginning to a multiple of w, so that every rank takes the same number of steps (their
    gradient all-reduces must pair up); evaluation does not pad, so that no sample counts twice.
    """

    def __init__(self, size: int, seed: int, shuffle: bool, rank: int = 0, world_size: int = 1,
                 pad: bool = True) -> None:
        self.size, self.seed, self.shuffle = size, seed, shuffle
        self.rank, self.world_size, self.pad = rank, world_size, pad
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def order(self) -> list[int]:
        """This rank's indices for the current epoch, from the start of the epoch."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(derive_seed(self.seed, SHUFFLE_STREAM, self.epoch))
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = list(range(self.size))
        if self.pad and self.size % self.world_size:
            order += order[: self.world_size - self.size % self.world_size]
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        return iter([(epoch, index) for index in self.order()[self.start :]])

    def __len__(self) -> int:
        per_rank = -(-self.size // self.world_size) if self.pad else len(range(self.rank, self.size, self.world_size))
        return max(0, per_rank - self.start)  # a resume at an epoch's very end has nothing left


MASK64 = 2**64 - 1


def sample_seed(base: int, epoch: int, index: int) -> int:
    """A 64-bit seed for one sample: SplitMix64's finaliser over (base, epoch, index), a bijection,
    so no two (epoch, index) pairs below 2**32 share a seed. About half a microsecond: this runs
    for every sample, where derive_seed's hash (two microseconds) would show."""
    z = (base ^ (epoch << 32) ^ index) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class KeyedRandomness(Dataset):
    """Wraps a map-style dataset (`ds[i]` gives a sample): fetching key (epoch, index) gives
    `dataset[index]` with the global generators seeded from (seed, stream, epoch, index).

    `stream` tells training from validation samples. `__getitems__` (which DataLoader calls
    with a whole batch of keys) saves and restores the generators once per batch, not per
    sample: saving NumPy's state alone costs about 30 µs.
    """

    def __init__(self, dataset: Dataset, seed: int, stream: int) -> None:
        self.dataset, self.base = dataset, derive_seed(seed, stream)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[tuple[int, int]]) -> list[Any]:
        # In a worker, nothing else draws from this process's generators: no need to put them back.
        saved = None if get_worker_info() is not None else \
            (random.getstate(), np.random.get_state(), torch.default_generator.get_state())
        seed_python, seed_numpy, seed_torch = random.seed, np.random.seed, torch.default_generator.manual_seed
        try:
            samples = []
            for epoch, index in keys:
                seed = sample_seed(self.base, epoch, index)
                seed_python(seed)
                seed_numpy(seed & 0xFFFFFFFF)  # NumPy's legacy generator takes 32 bits
                seed_torch(seed)  # the CPU generator only: workers never draw on a GPU
                samples.append(self.dataset[index])
            return samples
        finally:
            if saved is not None:
                random.setstate(saved[0])
                np.random.set_state(saved[1])
                torch.default_generator.set_state(saved[2])


def ignore_sigint_in_worker(worker_id: int) -> None:
    """Ctrl-C reaches every process of the terminal's group, workers included. Let the main process
    alone handle it (finish the step, write a checkpoint); it shuts the workers down after.

    Not a seeding function: torch (1.9 and later) already seeds `random`, torch and NumPy in each
    worker from the loader's base seed, and KeyedRandomness re-seeds them for every sample anyway.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def make_loader(dataset: Dataset, batch_size: int, seed: int, train: bool, num_workers: int = 0,
                persistent_workers: bool = False, prefetch_factor: int | None = None,
                rank: int = 0, world_size: int = 1) -> DataLoader:
    """A DataLoader over `dataset` whose order and random draws repeat for a seed, with any number
    of workers. Training shuffles (and pads under torchrun); validation keeps the dataset's order.
    Under torchrun, each rank gets its share of the one order (see EpochSampler)."""
    stream = TRAIN_SAMPLE_STREAM if train else VAL_SAMPLE_STREAM
    return DataLoader(
        KeyedRandomness(dataset, seed, stream),
        batch_size=batch_size,
        sampler=EpochSampler(len(dataset), seed, shuffle=train, rank=rank, world_size=world_size, pad=train),
        num_workers=num_workers,
        worker_init_fn=ignore_sigint_in_worker,
        # The loader draws its workers' base seed from this generator, never from the global
        # one, so creating a loader or an iterator shifts no training randomness.
        generator=torch.Generator().manual_seed(derive_seed(seed, LOADER_STREAM)),
        persistent_workers=persistent_workers and num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
    )
