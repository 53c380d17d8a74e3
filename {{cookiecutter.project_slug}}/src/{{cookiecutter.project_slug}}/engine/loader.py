"""The research loader: utils/data.py's keyed loader, grown for what a single process never needs.

- `ShardedEpochSampler`: each rank's share of the one order of an epoch (utils/data.py's
  EpochSampler), padded so that every rank takes the same number of steps, and a resumed epoch's
  remaining samples only.
- Workers that leave Ctrl-C to the training process, which then finishes its step and writes a
  checkpoint: `ignore_sigint_in_worker`, `CtrlCSafeLoader`.
- `make_sharded_loader`: the loader of a run, with persistent workers and a prefetch depth.

What a sample draws is keyed exactly as in utils/data.py, by (seed, epoch, index): a run on one
process, or with another number of workers, trains on the same samples with the same draws.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset

from ..utils.data import EpochSampler, KeyedRandomness
from ..utils.repro import Stream, derive_seed
from .invariant import ShardBatches


class ShardedEpochSampler(EpochSampler):
    """Yields (epoch, index) keys: this process's share of an order that is a function of
    (seed, epoch) alone.

    Global step j of an epoch trains on the samples order[j*B : (j+1)*B] (B: the global batch),
    whatever the number of processes. Under torchrun, rank r of w takes every w-th sample
    (r, r + w, ...), an equal share of every global batch; with `pad`, the order is first extended
    by its own beginning to a multiple of w, so that every rank takes the same number of steps
    (their gradient all-reduces must pair up). Evaluation does not pad: no sample counts twice.
    Call set_epoch(e, start) before each epoch: `start` skips the epoch's first samples, those a
    resumed run has trained on already (a multiple of the global batch, and so of w).
    `pad_multiple` (a multiple of w; default w) is what the order is padded to a multiple of:
    --invariant-shards N pads to N, so that the padding is the same whatever the world size.
    """

    def __init__(self, size: int, seed: int, shuffle: bool, rank: int = 0, world_size: int = 1,
                 pad: bool = True, pad_multiple: int | None = None) -> None:
        super().__init__(size, seed, shuffle)
        self.rank, self.world_size, self.pad = rank, world_size, pad
        self.multiple = pad_multiple or world_size
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def order(self) -> list[int]:
        """The epoch's whole order (every rank's samples, padded), from its beginning."""
        order = super().order()
        if self.pad and self.size % self.multiple:
            order += (order * self.multiple)[: self.multiple - self.size % self.multiple]
        return order

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        return iter([(epoch, index) for index in self.order()[self.start + self.rank :: self.world_size]])

    def __len__(self) -> int:
        padded = self.size + (-self.size % self.multiple if self.pad else 0)
        return len(range(self.start + self.rank, padded, self.world_size))


def ignore_sigint_in_worker(worker_id: int) -> None:
    """Ctrl-C reaches every process of the terminal's group, workers included. Let the main process
    alone handle it (finish the step, write a checkpoint); it shuts the workers down after.
    (CtrlCSafeLoader starts them ignoring it already; this keeps them so whoever starts them.)

    Not a seeding function: torch (1.9 and later) already seeds `random`, torch and NumPy in each
    worker from the loader's base seed, and KeyedRandomness re-seeds them for every sample anyway.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class CtrlCSafeLoader(DataLoader):
    """A DataLoader whose workers ignore Ctrl-C from their first instruction. Under the spawn start
    method (macOS's and Windows' default) a worker imports torch for a second or more before
    ignore_sigint_in_worker runs: a Ctrl-C then would kill it, and the step would end on a dead
    worker instead of a checkpoint. A new process keeps an ignored signal ignored (not a handler,
    nor, under spawn, a blocked signal), so this process ignores SIGINT for the few milliseconds
    that starting its workers takes, and then takes its own handler back."""

    def _get_iterator(self):  # where DataLoader starts its workers (PyTorch's own name for it)
        handler = signal.getsignal(signal.SIGINT)
        if self.num_workers == 0 or handler is None or threading.current_thread() is not threading.main_thread():
            return super()._get_iterator()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return super()._get_iterator()
        finally:
            signal.signal(signal.SIGINT, handler)


def make_sharded_loader(dataset: Dataset, batch_size: int, seed: int, train: bool, num_workers: int = 0,
                        persistent_workers: bool = False, prefetch_factor: int | None = None,
                        rank: int = 0, world_size: int = 1, invariant_shards: int = 0) -> DataLoader:
    """utils/data.py's make_loader for a run: `batch_size` is this process's micro-batch. Training
    shuffles (and pads under torchrun); validation keeps the dataset's order. Under torchrun, each
    rank gets its share of the one order (see ShardedEpochSampler). With `invariant_shards` N
    (engine/invariant.py), training pads to a multiple of N, and validation is scored shard by
    shard, in batches of `batch_size` that never mix two shards (ShardBatches)."""
    stream = Stream.TRAIN_SAMPLE if train else Stream.VAL_SAMPLE
    if invariant_shards and not train:
        batching = {"batch_sampler": ShardBatches(len(dataset), invariant_shards, batch_size, rank, world_size)}
    else:
        batching = {"batch_size": batch_size, "sampler": ShardedEpochSampler(
            len(dataset), seed, shuffle=train, rank=rank, world_size=world_size, pad=train,
            pad_multiple=invariant_shards or None)}
    return CtrlCSafeLoader(
        KeyedRandomness(dataset, seed, stream),
        **batching,
        num_workers=num_workers,
        worker_init_fn=ignore_sigint_in_worker,
        # The loader draws its workers' base seed from this generator, never from the global
        # one, so creating a loader or an iterator shifts no training randomness.
        generator=torch.Generator().manual_seed(derive_seed(seed, Stream.LOADER)),
        persistent_workers=persistent_workers and num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
    )
