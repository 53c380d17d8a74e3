"""The seeded DataLoader factory: data order and every random draw a function of the seed, with
any number of workers.

This file needs only repro.py beside it: copy both into any PyTorch project. Then build each
loader with `make_loader(dataset, batch_size, seed, train=...)` and call
`loader.sampler.set_epoch(epoch)` before each epoch. Here, put your data in task.py.

A dataset written the usual way draws its augmentation from the global generators (Python's
`random`, NumPy's `np.random`, torch's `torch.rand`), as torchvision and albumentations
transforms do. In DataLoader workers those generators are per-process copies, seeded from the
loader's base seed: what sample i gets then depends on which worker loaded it and what that worker
loaded before, so the result changes with `--num-workers`. PyTorch's documented recipe (a seeded
`generator` plus a `worker_init_fn`) repeats a run only with the same worker count.

Here, three pieces make the data stream a function of (seed, epoch, index) alone:
- `EpochSampler`: the order of an epoch is a function of (seed, epoch), and global step j takes
  its j-th slice, whatever the number of processes. It runs in the main process and hands out
  (epoch, index) keys, so even persistent workers, which keep an old copy of the dataset, always
  know the current epoch.
- `KeyedRandomness`: before it fetches sample `index`, it seeds the three global generators with
  a key of (seed, epoch, index). Whatever the dataset draws is then the same in any worker, after
  any other sample, and after a resume. With 0 workers it runs in the training process and leaves
  the generators seeded for its last sample: harmless, since the training loop seeds them again
  before every forward pass (repro.py: seed_step).
  Seeding is most of what this costs a sample, so a dataset may say which generators its
  `__getitem__` draws from: `draws_from = ("torch",)` (torchvision's transforms draw from torch
  alone), `draws_from = ()` (no random augmentation); only those are seeded.
  Without the attribute, all three are. A dataset that draws from a generator it leaves out would
  draw differently in each worker: declare every generator that any sample may draw from.
- the loader's own generator is seeded, so making an iterator draws nothing from torch's
  global generator.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .repro import GLOBAL_GENERATORS, Stream, derive_seed, keyed_seed, seed_global_generators


class EpochSampler(Sampler):
    """Yields (epoch, index) keys: this process's share of an order that is a function of
    (seed, epoch) alone.

    Global step j of an epoch trains on the samples order[j*B : (j+1)*B] (B: the global batch),
    whatever the number of processes. Under torchrun, rank r of w takes every w-th sample
    (r, r + w, ...), an equal share of every global batch; with `pad`, the order is first extended
    by its own beginning to a multiple of w, so that every rank takes the same number of steps
    (their gradient all-reduces must pair up). Evaluation does not pad: no sample counts twice.
    Call set_epoch(e, start) before each epoch: `start` skips the epoch's first samples, those a
    resumed run has trained on already (a multiple of the global batch, and so of w).
    """

    def __init__(self, size: int, seed: int, shuffle: bool, rank: int = 0, world_size: int = 1,
                 pad: bool = True) -> None:
        self.size, self.seed, self.shuffle = size, seed, shuffle
        self.rank, self.world_size, self.pad = rank, world_size, pad
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def order(self) -> list[int]:
        """The epoch's whole order (every rank's samples, padded), from its beginning."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(derive_seed(self.seed, Stream.SHUFFLE, self.epoch))
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = list(range(self.size))
        if self.pad and self.size % self.world_size:
            order += order[: self.world_size - self.size % self.world_size]
        return order

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        return iter([(epoch, index) for index in self.order()[self.start + self.rank :: self.world_size]])

    def __len__(self) -> int:
        padded = self.size + (-self.size % self.world_size if self.pad else 0)
        return len(range(self.start + self.rank, padded, self.world_size))


def declared_draws(dataset: Dataset) -> tuple[str, ...]:
    """The global generators that `dataset` says it draws from (its `draws_from`), looking through
    wrappers that keep the dataset they wrap as `.dataset` (Subset, --max-samples); all three if it
    says nothing. Raises ValueError for a name that is not one of them."""
    while not hasattr(dataset, "draws_from") and hasattr(dataset, "dataset"):
        dataset = dataset.dataset
    draws = getattr(dataset, "draws_from", GLOBAL_GENERATORS)
    if isinstance(draws, str):  # ("torch") is a string: the tuple needs its comma, ("torch",)
        raise ValueError(f"draws_from is the string {draws!r}; write a tuple of names, such as ({draws!r},)")
    draws = tuple(draws)
    unknown = [name for name in draws if name not in GLOBAL_GENERATORS]
    if unknown:
        raise ValueError(f"draws_from names {', '.join(map(repr, unknown))}; it may name only "
                         f"{', '.join(map(repr, GLOBAL_GENERATORS))}")
    return draws


class KeyedRandomness(Dataset):
    """Wraps a map-style dataset (`ds[i]` gives a sample): fetching key (epoch, index) gives
    `dataset[index]` with the global generators it draws from seeded from (seed, stream, epoch, index).

    `stream` tells training from validation samples. DataLoader calls `__getitems__` with a whole
    batch of keys. An exception in the dataset is raised again as a SampleError that names the
    sample, so that a failure in a worker process still says which sample it was.
    """

    def __init__(self, dataset: Dataset, seed: int, stream: int) -> None:
        self.dataset, self.base = dataset, derive_seed(seed, stream)
        self.draws = declared_draws(dataset)
        self.validation = stream == Stream.VAL_SAMPLE  # for the error message: which set the sample is from

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[tuple[int, int]]) -> list[Any]:
        samples, base, dataset, draws = [], self.base, self.dataset, self.draws
        for epoch, index in keys:
            seed_global_generators(keyed_seed(base, epoch, index), generators=draws)
            try:
                samples.append(dataset[index])
            except Exception as error:
                where = f"validation sample {index}" if self.validation else f"sample {index} (epoch {epoch + 1})"
                raise SampleError(f"{where}: {type(error).__name__}: {error}") from error
        return samples


class SampleError(Exception):
    """The dataset raised for one sample; the message names the sample and the original error."""


def ignore_sigint_in_worker(worker_id: int) -> None:
    """Ctrl-C reaches every process of the terminal's group, workers included. Let the main process
    alone decide what it does (a training loop may finish its step and write a checkpoint first);
    it shuts the workers down after.
    (CtrlCSafeLoader starts them ignoring it already; this keeps them so whoever starts them.)

    Not a seeding function: torch (1.9 and later) already seeds `random`, torch and NumPy in each
    worker from the loader's base seed, and KeyedRandomness re-seeds them for every sample anyway.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class CtrlCSafeLoader(DataLoader):
    """A DataLoader whose workers ignore Ctrl-C from their first instruction. Under the spawn start
    method (macOS's and Windows' default) a worker imports torch for a second or more before
    ignore_sigint_in_worker runs: a Ctrl-C then would kill it, and the main process would fail on
    a dead worker instead of handling Ctrl-C itself. A new process keeps an ignored signal ignored
    (not a handler, nor, under spawn, a blocked signal), so this process ignores SIGINT for the few
    milliseconds that starting its workers takes, and then takes its own handler back."""

    def _get_iterator(self):  # where DataLoader starts its workers (PyTorch's own name for it)
        handler = signal.getsignal(signal.SIGINT)
        if self.num_workers == 0 or handler is None or threading.current_thread() is not threading.main_thread():
            return super()._get_iterator()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return super()._get_iterator()
        finally:
            signal.signal(signal.SIGINT, handler)


def make_loader(dataset: Dataset, batch_size: int, seed: int, train: bool, num_workers: int = 0,
                persistent_workers: bool = False, prefetch_factor: int | None = None,
                rank: int = 0, world_size: int = 1) -> DataLoader:
    """A DataLoader over `dataset` whose order and random draws repeat for a seed, with any number
    of workers. `batch_size` is this process's micro-batch. Training shuffles (and pads under
    torchrun); validation keeps the dataset's order. Under torchrun, each rank gets its share of
    the one order (see EpochSampler)."""
    stream = Stream.TRAIN_SAMPLE if train else Stream.VAL_SAMPLE
    return CtrlCSafeLoader(
        KeyedRandomness(dataset, seed, stream),
        batch_size=batch_size,
        sampler=EpochSampler(len(dataset), seed, shuffle=train, rank=rank, world_size=world_size, pad=train),
        num_workers=num_workers,
        worker_init_fn=ignore_sigint_in_worker,
        # The loader draws its workers' base seed from this generator, never from the global
        # one, so creating a loader or an iterator shifts no training randomness.
        generator=torch.Generator().manual_seed(derive_seed(seed, Stream.LOADER)),
        persistent_workers=persistent_workers and num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
    )
