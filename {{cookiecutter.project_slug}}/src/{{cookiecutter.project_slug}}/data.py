"""The data: `make_datasets(config)` is the one place to put yours.

It returns ordinary map-style datasets, (train, validation): `ds[i]` gives `(input, target)`.
Write `__getitem__` the usual way; its random augmentation may draw from Python's `random`,
NumPy's `np.random` or torch's global generator, as torchvision transforms do. The loader
(utils/loader.py) seeds those generators from (seed, epoch, index) before each sample, so the
result does not depend on the number of workers, and survives an exact resume.

Two things would break that, so don't do them: keep a generator of your own made at import or in
`__init__` (`self.rng = np.random.default_rng()`; its state would depend on the worker), or draw
in `__init__` from an unseeded generator. Draw per sample, in `__getitem__`, from the globals.

Which samples are in the data and in the validation set is a function of `config.data_seed`,
not of `config.seed`: runs with different seeds are scored on the same validation samples.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from .config import Config
from .utils.repro import derive_seed

NUM_CLASSES = 10
IMAGE_SIZE = 8
VAL_FRACTION = 0.2
SYNTHETIC_SAMPLES = 2000
DATA_STREAM, SPLIT_STREAM = 1, 2  # streams of the data seed (see utils/loader.py for the others)


def make_datasets(config: Config) -> tuple[Dataset, Dataset]:
    """(train, validation) for `config.dataset`, split by `config.data_seed`."""
    images, labels = load_arrays(config.dataset, config.data_seed)
    order = np.random.default_rng(derive_seed(config.data_seed, SPLIT_STREAM)).permutation(len(labels))
    n_val = int(len(labels) * VAL_FRACTION)
    val, train = order[:n_val], order[n_val:]
    return ImageDataset(images[train], labels[train], augment=True), ImageDataset(images[val], labels[val])


class ImageDataset(Dataset):
    """8x8 grey images and their labels, augmented on the fly for training."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, augment: bool = False) -> None:
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index]
        if self.augment:
            image = random_shift_contrast_noise(image)
        return image, self.labels[index]


def random_shift_contrast_noise(image: torch.Tensor) -> torch.Tensor:
    """A training augmentation that draws from all three global generators, as real ones do."""
    dy, dx = np.random.randint(-1, 2, size=2)  # NumPy: shift by up to one pixel
    contrast = random.uniform(0.8, 1.2)  # Python's random
    noise = 0.05 * torch.randn(image.shape)  # torch
    return torch.roll(image, shifts=(int(dy), int(dx)), dims=(-2, -1)) * contrast + noise


def load_arrays(name: str, data_seed: int) -> tuple[np.ndarray, np.ndarray]:
    if name == "synthetic":
        return make_synthetic(data_seed)
    if name == "digits":
        return load_digits_arrays()
    raise ValueError(f"unknown dataset {name!r}; choose synthetic or digits")


def make_synthetic(data_seed: int, n: int = SYNTHETIC_SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """Image-like data: ten classes, each a smooth 8x8 pattern, seen shifted, scaled and noisy."""
    rng = np.random.default_rng(derive_seed(data_seed, DATA_STREAM))
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
    """scikit-learn's 1,797 handwritten 8x8 digits, shipped inside its package: no download.

    `sklearn.datasets.load_digits()` reads them from a CSV file in scikit-learn's package; we read
    that same file directly when it is there, because importing scikit-learn costs about a second
    in every process. The tests check that both give the same arrays.
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
