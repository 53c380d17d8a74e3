"""Yours: the task. Everything about the problem lives in this file; the rest of the package serves
any task that keeps the promises below (README: "Bring your own task").

`config` is the run's settings, one attribute per flag of train.py (`config.width` for --width):
the example reads data_seed, width and dropout. The same file trains in both sizes of the project.

    make_datasets(config) -> (train_set, val_set)
        Ordinary map-style datasets: `len(ds)`, and `ds[i]` gives `(input, target)`. Random
        augmentation draws, per sample, in `__getitem__`, from Python's `random`, NumPy's
        `np.random` or torch's global generator: utils/data.py seeds those from
        (seed, epoch, index) before each sample, whatever the number of loader workers.
        Optional: a dataset's `draws_from` names the generators it draws from, ("torch",) say,
        or () for none; only those are then seeded, which saves a few µs a sample. Without it,
        all three are. A generator it leaves out is not seeded per sample, and then draws
        differently in each worker: name every one that any sample may draw from.
    make_model(config, train_set) -> nn.Module
        Built from what the data says (here: the image size and the number of classes), so no
        number is written twice. train.py seeds torch just before: the initial weights are a
        function of the seed.
    batch_sums(outputs, targets) -> dict of tensors
        The sums over one batch that the metrics are made of. Evaluation adds them up over every
        batch of the split before it divides, so a mean is right for any batch size and output
        shape: count what your metric averages over (samples here; tokens for a language model).
    metrics_from_sums(sums) -> dict of scalar tensors
        'loss' (what training minimises) and any other figures, by name. Called with one batch's
        sums for each training step (that 'loss' is the one back-propagated) and with a whole
        split's sums for evaluation.
    HEADLINE_METRIC
        The figure that a run's last line reports, beside the weights' hash.

The example: small 8x8 grey images in ten classes ({{ cookiecutter.dataset }}: DATASET below), a
little convolutional classifier, cross-entropy and accuracy.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from .utils.repro import Stream, derive_seed

HEADLINE_METRIC = "accuracy"
DATASET = {{ cookiecutter.dataset|tojson }}  # the example's data, chosen at bake time: "synthetic" or "digits"
NUM_CLASSES = 10
IMAGE_SIZE = 8
VAL_FRACTION = 0.2
SYNTHETIC_SAMPLES = 2000


# ---- data ------------------------------------------------------------------------------------

def make_datasets(config) -> tuple[Dataset, Dataset]:
    """(train, validation) of DATASET. Which samples go where is a function of `config.data_seed`,
    not of `config.seed`: runs with other seeds are scored on the same samples."""
    images, labels = load_arrays(DATASET, config.data_seed)
    order = np.random.default_rng(derive_seed(config.data_seed, Stream.SPLIT)).permutation(len(labels))
    n_val = int(len(labels) * VAL_FRACTION)
    val, train = order[:n_val], order[n_val:]
    return ImageDataset(images[train], labels[train], augment=True), ImageDataset(images[val], labels[val])


class ImageDataset(Dataset):
    """Grey images and their labels, augmented on the fly for training."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, augment: bool = False) -> None:
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)
        self.augment = augment
        self.image_size, self.num_classes = images.shape[-1], NUM_CLASSES  # what make_model needs to know
        # The global generators __getitem__ draws from: utils/data.py seeds only these before
        # each sample (each costs a few µs). The augmentation draws from all three; without it,
        # nothing is drawn and nothing needs seeding.
        self.draws_from = ("random", "numpy", "torch") if augment else ()

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
    rng = np.random.default_rng(derive_seed(data_seed, Stream.DATA))
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
    that same file directly when it is there, because importing scikit-learn costs over a second
    in every process (`time python -c "import sklearn"`). The tests check that both give the same arrays.
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


# ---- model -----------------------------------------------------------------------------------

def make_model(config, train_set: ImageDataset) -> nn.Module:
    return Net(train_set.num_classes, train_set.image_size, width=config.width, dropout=config.dropout)


class Net(nn.Module):
    """A small convolutional classifier. It has BatchNorm and Dropout on purpose: both behave
    differently in train and eval mode, so a forgotten `model.eval()` changes results, and the
    tests can check that evaluation gets it right."""

    def __init__(self, num_classes: int, image_size: int, width: int = 16, dropout: float = 0.25) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width),  # running statistics update in train mode only
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(dropout),  # draws from torch's generator in train mode, identity in eval
            nn.Linear(2 * width * (image_size // 2) ** 2, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


# ---- loss and metrics ------------------------------------------------------------------------

def batch_sums(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    # F.cross_entropy, like nn.CrossEntropyLoss(), holds no parameters: nothing to move to the device.
    return {"loss": F.cross_entropy(outputs, targets, reduction="sum"),
            "correct": (outputs.argmax(dim=1) == targets).sum(),
            "samples": targets.numel()}  # a plain number may stand for a tensor


def metrics_from_sums(sums: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"loss": sums["loss"] / sums["samples"], "accuracy": sums["correct"] / sums["samples"]}
