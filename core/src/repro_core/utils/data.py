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
- `EpochSampler`: the order of an epoch is a function of (seed, epoch), and step j takes its
  j-th slice. It runs in the main process and hands out (epoch, index) keys, so a worker never
  needs to be told the epoch (not even a persistent one, which keeps an old copy of the dataset).
- `KeyedRandomness`: before it fetches sample `index`, it seeds the three global generators with
  a key of (seed, epoch, index). Whatever the dataset draws is then the same in any worker, after
  any other sample, and after a resume. With 0 workers it runs in the training process and leaves
  the generators seeded for its last sample: harmless, since the training loop seeds them again
  before every forward pass (repro.py: seed_step).
  Seeding is most of what this costs a sample, so a dataset may say which generators its
  `__getitem__` draws from: `draws_from = ("torch",)` (torchvision's v2 transforms draw from torch
  alone; v1's RandomChoice and RandomOrder draw from Python's random too), `draws_from = ()` (no
  random augmentation); only those are seeded.
  Without the attribute, all three are. A dataset that draws from a generator it leaves out would
  draw differently in each worker: declare every generator that any sample may draw from.
- the loader's own generator is seeded, so making an iterator draws nothing from torch's
  global generator.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .repro import GLOBAL_GENERATORS, Stream, derive_seed, keyed_seed, seed_global_generators


class EpochSampler(Sampler):
    """Yields (epoch, index) keys: the order of an epoch, a function of (seed, epoch) alone.

    Step j of an epoch trains on the samples order[j*B : (j+1)*B] (B: the batch). Call
    set_epoch(e) before each epoch: each epoch has its own order, and a run resumed at epoch e
    takes that epoch's order again. Validation (shuffle=False) keeps the dataset's order, every
    sample once. (The research size's engine/loader.py shares this order among processes.)
    """

    def __init__(self, size: int, seed: int, shuffle: bool) -> None:
        self.size, self.seed, self.shuffle = size, seed, shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> list[int]:
        """The epoch's whole order."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(derive_seed(self.seed, Stream.SHUFFLE, self.epoch))
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = list(range(self.size))
        return order

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        return iter([(epoch, index) for index in self.order()])

    def __len__(self) -> int:
        return self.size


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


def make_loader(dataset: Dataset, batch_size: int, seed: int, train: bool, num_workers: int = 0) -> DataLoader:
    """A DataLoader over `dataset` whose order and random draws repeat for a seed, with any number
    of workers. Training shuffles; validation keeps the dataset's order."""
    stream = Stream.TRAIN_SAMPLE if train else Stream.VAL_SAMPLE
    return DataLoader(
        KeyedRandomness(dataset, seed, stream),
        batch_size=batch_size,
        sampler=EpochSampler(len(dataset), seed, shuffle=train),
        num_workers=num_workers,
        # The loader draws its workers' base seed from this generator, never from the global
        # one, so creating a loader or an iterator shifts no training randomness.
        generator=torch.Generator().manual_seed(derive_seed(seed, Stream.LOADER)),
    )
