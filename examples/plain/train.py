"""A plain PyTorch training script, as a user already has one (short, flat, explicit, like
pytorch/examples' mnist), with repro_core added. Every line the core adds carries a comment that
starts `# repro_core:` and says why: those are the lines to copy into an existing script.

The data is made from the seed (no download): Gaussian blobs, one per class, with a random
augmentation drawn from NumPy's global generator in __getitem__, as many transforms draw. With a
plain DataLoader that draw depends on which worker process loads the sample, so --num-workers
changes the weights; with repro_core's make_loader it is a function of (seed, epoch, index).

    python examples/plain/train.py --seed 0 --epochs 2 --num-workers 2

The last line printed is `weights_sha256 <hex>`: equal hashes mean equal weights, bit for bit.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from repro_core import (  # repro_core: the package (pip install ./core), instead of torch.manual_seed and DataLoader
    configure_determinism,
    make_loader,
    restart_with_hash_seed,
    seed_everything,
    seed_step,
    set_thread_count,
    state_dict_sha256,
)
from torch import nn
from torch.utils.data import Dataset


class Blobs(Dataset):
    """Points around one centre per class. Training samples get noise and a random mask of features."""

    def __init__(self, x: np.ndarray, y: np.ndarray, augment: bool) -> None:
        self.x, self.y, self.augment = x, y, augment

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x = self.x[index]
        if self.augment:  # drawn from NumPy's global generator, as many augmentation libraries draw
            x = x + np.random.normal(0.0, 0.5, x.shape)
            x = x * (np.random.rand(*x.shape) > 0.1)
        return torch.from_numpy(x.astype(np.float32)), int(self.y[index])


def make_datasets(seed: int, size: int = 256, features: int = 16, classes: int = 4) -> tuple[Blobs, Blobs]:
    """A training set of `size` samples and a validation set of size // 4, both made from the seed."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, (classes, features))
    y = rng.integers(0, classes, size + size // 4)
    x = centres[y] + rng.normal(0.0, 1.5, (len(y), features))
    return Blobs(x[:size], y[:size], augment=True), Blobs(x[size:], y[size:], augment=False)


class Net(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.dropout = nn.Dropout(0.2)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


def evaluate(model: nn.Module, loader) -> tuple[float, int, int]:
    """The summed cross-entropy, the number right and the number of samples over the whole loader."""
    model.eval()  # repro_core: dropout off, so the evaluation draws nothing: its figure is a function of the weights
    loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            output = model(x)
            loss += F.cross_entropy(output, y, reduction="sum").item()
            correct += (output.argmax(dim=1) == y).sum().item()
            count += len(y)
    return loss, correct, count


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A small MLP on synthetic blobs, repeatable bit for bit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the final weights hash to this file")
    parser.add_argument("--save-model", type=Path, help="save the final state_dict here (torch.save)")
    return parser.parse_args(argv)


def main(args: argparse.Namespace) -> None:
    configure_determinism("strict")  # repro_core: deterministic kernels, set before anything touches a GPU
    set_thread_count(args.threads)  # repro_core: a sum split over another number of threads adds in another order
    seed_everything(args.seed)  # repro_core: Python, NumPy and torch seeded before the first draw (the weights)

    train_set, val_set = make_datasets(args.seed)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # repro_core: make_loader instead of DataLoader(shuffle=True): the order is a function of (seed, epoch) and
    # what sample i draws in __getitem__ a function of (seed, epoch, i), whichever worker loads it
    train_loader = make_loader(train_set, args.batch_size, seed=args.seed, train=True, num_workers=args.num_workers)
    val_loader = make_loader(val_set, 64, seed=args.seed, train=False, num_workers=args.num_workers)

    step = 0
    for epoch in range(args.epochs):
        train_loader.sampler.set_epoch(epoch)  # repro_core: each epoch its own order, from (seed, epoch)
        model.train()
        for x, y in train_loader:
            seed_step(args.seed, step)  # repro_core: dropout's masks from (seed, step), not from what ran before
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
        val_loss, correct, count = evaluate(model, val_loader)
        print(f"epoch {epoch + 1} train_loss {loss.item():.6f} val_loss {val_loss / count:.6f} "
              f"val_correct {correct}/{count}")

    if args.save_model:
        torch.save(model.state_dict(), args.save_model)
    digest = state_dict_sha256(model.state_dict())  # repro_core: equal hashes mean equal weights, bit for bit
    if args.out:
        args.out.write_text(digest + "\n")
    print(f"weights_sha256 {digest}")


if __name__ == "__main__":
    args = parse_args()
    restart_with_hash_seed(args.seed)  # repro_core: restarts Python with PYTHONHASHSEED=seed (set and dict orders)
    main(args)
