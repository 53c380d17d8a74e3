"""The example data, its augmentation, and a loader whose every draw is a function of the config.

The design that makes runs repeat, whatever the number of workers:
- The order of an epoch is a function of (seed, epoch) alone (EpochSampler).
- A sample's augmentation is a function of (seed, epoch, sample index) alone (epoch_augmentation).
  Which worker process loads it, and what that worker loaded before, no longer matter.
- The sampler runs in the main process and hands each worker (epoch, index) pairs, so even
  persistent workers, which keep an old copy of the dataset, always know the current epoch.

PyTorch's documented recipe (a seeded generator plus a worker_init_fn) is also applied in
make_loader, for user code that draws from the global generators inside a worker; but that recipe
alone repeats a run only with the same num_workers, because each worker's stream depends on
which samples it happened to load.
"""

from __future__ import annotations

import importlib.util
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .utils.repro import derive_seed

NUM_CLASSES = 10
IMAGE_SIZE = 8
VAL_FRACTION = 0.2
SYNTHETIC_SAMPLES = 2000

# Each use of randomness gets its own stream id, so that no two uses share a generator: adding
# a draw to one (say, a new augmentation) shifts nothing in another (say, the shuffle order).
DATA_STREAM, SPLIT_STREAM, SHUFFLE_STREAM, AUGMENT_STREAM, LOADER_STREAM = range(5)


def make_synthetic(seed: int, n: int = SYNTHETIC_SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """Image-like data: ten classes, each a smooth 8x8 pattern, seen shifted, scaled and noisy."""
    rng = np.random.default_rng(derive_seed(seed, DATA_STREAM))
    raw = rng.normal(size=(NUM_CLASSES, IMAGE_SIZE + 2, IMAGE_SIZE + 2))
    # A 3x3 box blur makes each prototype smooth, like strokes rather than pixel noise.
    prototypes = sum(
        raw[:, dy : dy + IMAGE_SIZE, dx : dx + IMAGE_SIZE] for dy in range(3) for dx in range(3)
    )
    prototypes = (prototypes - prototypes.min()) / (prototypes.max() - prototypes.min())
    labels = rng.integers(0, NUM_CLASSES, size=n)
    images = prototypes[labels] * rng.uniform(0.6, 1.0, size=(n, 1, 1))
    shifts = rng.integers(-1, 2, size=(n, 2))
    images = np.stack([np.roll(img, tuple(s), axis=(0, 1)) for img, s in zip(images, shifts, strict=True)])
    images = images + rng.normal(0.0, 0.15, size=images.shape)
    return images[:, None].astype(np.float32), labels.astype(np.int64)


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 handwritten 8x8 digits, shipped inside the package: no download.

    `sklearn.datasets.load_digits()` reads them from a CSV file in scikit-learn's package; we read
    that same file directly when it is there, because importing scikit-learn costs about a second
    in every process (each training run, each DataLoader-free test). The tests check that both
    give the same arrays.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    csv_file = Path(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz") if spec else None
    if csv_file is not None and csv_file.exists():
        table = np.loadtxt(csv_file, delimiter=",")
        pixels, labels = table[:, :-1], table[:, -1]
    else:
        from sklearn.datasets import load_digits

        digits = load_digits()
        pixels, labels = digits.data, digits.target
    images = (pixels.reshape(-1, 1, IMAGE_SIZE, IMAGE_SIZE) / 16.0).astype(np.float32)
    return images, labels.astype(np.int64)


def load_arrays(name: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if name == "synthetic":
        return make_synthetic(seed)
    if name == "digits":
        return load_digits_arrays()
    raise ValueError(f"unknown dataset {name!r}; choose synthetic or digits")


def split(images: np.ndarray, labels: np.ndarray, seed: int) -> tuple[tuple, tuple]:
    """A train/validation split that depends on the seed alone."""
    order = np.random.default_rng(derive_seed(seed, SPLIT_STREAM)).permutation(len(labels))
    n_val = int(len(labels) * VAL_FRACTION)
    val, train = order[:n_val], order[n_val:]
    return (images[train], labels[train]), (images[val], labels[val])


def epoch_augmentation(seed: int, epoch: int, size: int, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Every random draw of one epoch's augmentation, for all `size` samples at once.

    Sample i uses row i, so its augmentation is a function of (seed, epoch, i) alone: which worker
    loads it, and what that worker loaded before, no longer matter. Drawing the epoch in bulk is
    the fast way to get that here: building a fresh generator for each sample costs about 15 µs,
    more than this small augmentation itself. For large per-sample randomness (noise on big
    images), key a generator by (seed, epoch, index) instead: `derive_seed(seed, AUGMENT_STREAM,
    epoch, index)`; next to decoding an image its cost disappears.
    """
    epoch_seed = derive_seed(seed, AUGMENT_STREAM, epoch)
    rnd, rng = random.Random(epoch_seed), np.random.default_rng(epoch_seed)
    return {
        "contrast": np.array([rnd.uniform(0.8, 1.2) for _ in range(size)], dtype=np.float32),  # Python's random
        "shift": rng.integers(-1, 2, size=(size, 2)),  # NumPy: shift by up to one pixel
        "noise": rng.normal(0.0, 0.05, size=(size, *shape)).astype(np.float32),
    }


def augment(image: np.ndarray, contrast: float, shift: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """A training augmentation: shift, contrast and pixel noise, all given; nothing drawn here."""
    return np.roll(image, (int(shift[0]), int(shift[1])), axis=(-2, -1)) * contrast + noise


class ImageDataset(Dataset):
    """8x8 images and labels. Indexed by (epoch, index) so that augmentation can depend on both."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, seed: int, train: bool) -> None:
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)
        self.seed = seed
        self.train = train
        self.draws_epoch, self.draws = None, {}  # this process's copy of the current epoch's draws

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, index = key
        image = self.images[index]
        if self.train:
            if self.draws_epoch != epoch:
                self.draws = epoch_augmentation(self.seed, epoch, len(self), tuple(image.shape))
                self.draws_epoch = epoch
            draws = self.draws
            image = torch.from_numpy(augment(image.numpy(), draws["contrast"][index], draws["shift"][index],
                                             draws["noise"][index]))
        return image, self.labels[index]


class EpochSampler(Sampler):
    """Yields (epoch, index) pairs in an order that is a function of (seed, epoch) alone.

    Call set_epoch(e) before each epoch. `start` skips this rank's first samples of the epoch, so
    that a resumed run continues exactly where it stopped. Under torchrun, rank r of w takes every
    w-th sample of the one shared order (r, r + w, ...). With `pad`, the order is first extended by
    its own beginning to a multiple of w, so that every rank takes the same number of steps (their
    gradient all-reduces must pair up); evaluation does not pad, so that no sample counts twice.
    """

    def __init__(self, size: int, seed: int, shuffle: bool, rank: int = 0, world_size: int = 1,
                 pad: bool = True) -> None:
        self.size = size
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.pad = pad
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch = epoch
        self.start = start

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


def seed_worker(worker_id: int) -> None:
    """Seeds Python's and NumPy's global generators in a DataLoader worker (PyTorch's recipe).

    torch seeds each worker's torch generator itself (base seed + worker id) but leaves `random`
    and NumPy as copies of the parent's state, so without this every worker would draw the same
    "random" numbers. Our own augmentation does not need it (see epoch_augmentation); user code
    that calls np.random inside a worker does.
    """
    worker_seed = torch.initial_seed() % 2**32
    random.seed(worker_seed)
    np.random.seed(worker_seed)
    # Ctrl-C reaches every process of the terminal's group, workers included. Let the main process
    # alone handle it (finish the step, write a checkpoint); it shuts the workers down after.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def make_loader(
    dataset: ImageDataset,
    batch_size: int,
    seed: int,
    shuffle: bool,
    num_workers: int = 0,
    persistent_workers: bool = False,
    prefetch_factor: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> DataLoader:
    """A DataLoader whose order and augmentation repeat for a seed, with any number of workers.
    Under torchrun, each rank gets its share of the one order (see EpochSampler)."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=EpochSampler(len(dataset), seed, shuffle, rank, world_size, pad=shuffle),
        num_workers=num_workers,
        worker_init_fn=seed_worker,
        # The loader draws its workers' base seed from this generator, never from the global
        # one, so creating a loader or an iterator shifts no training randomness.
        generator=torch.Generator().manual_seed(derive_seed(seed, LOADER_STREAM)),
        persistent_workers=persistent_workers and num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
    )
