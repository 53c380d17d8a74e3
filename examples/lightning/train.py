"""A Lightning project, as a user already has one (a LightningModule and a LightningDataModule), with
repro_core added. Every line the core adds carries a comment that starts `# repro_core:`.

The model and data are those of ../plain/train.py: a small MLP with dropout, and Gaussian blobs
made from the seed whose training samples draw a random augmentation from NumPy's global
generator in __getitem__.

    python examples/lightning/train.py --seed 0 --num-workers 2                  # with the core
    python examples/lightning/train.py --seed 0 --num-workers 2 --without-core   # the usual recipe

--without-core swaps in Lightning's usual recipe for the seeds and the loader:
`lightning.seed_everything(seed, workers=True)` and `DataLoader(shuffle=True)`. It repeats a run
only with the same worker count: each worker's generators are seeded from (seed, worker id,
rank), so what a sample draws depends on which worker loads it. With the core, the training
loader is repro_core's make_loader, whose draws are a function of (seed, epoch, index), and a
callback keys each step's dropout by (seed, step): 0 and 2 workers give the same weights.

The last line printed is `weights_sha256 <hex>`: equal hashes mean equal weights, bit for bit.
"""

from __future__ import annotations

import argparse

from repro_core import restart_with_hash_seed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A small MLP on synthetic blobs, with Lightning")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--without-core", action="store_true",
                        help="Lightning's usual recipe: seed_everything(workers=True) and DataLoader(shuffle=True)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    # repro_core: restarts Python with PYTHONHASHSEED=seed (set and dict orders); first, so that the slow
    # imports below (lightning takes seconds) run once, in the restarted interpreter only
    restart_with_hash_seed(parse_args().seed)

import logging  # noqa: E402
import warnings  # noqa: E402

import lightning as L  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from repro_core import (  # noqa: E402  # repro_core: what the core adds, besides restart_with_hash_seed
    configure_determinism,
    make_loader,
    seed_everything,
    seed_step,
    set_thread_count,
    state_dict_sha256,
)
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


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


class BlobsData(L.LightningDataModule):
    def __init__(self, seed: int, batch_size: int, num_workers: int, core: bool, size: int = 256,
                 features: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.seed, self.batch_size, self.num_workers, self.core = seed, batch_size, num_workers, core
        rng = np.random.default_rng(seed)
        centres = rng.normal(0.0, 1.0, (classes, features))
        y = rng.integers(0, classes, size + size // 4)
        x = centres[y] + rng.normal(0.0, 1.5, (len(y), features))
        self.train_set = Blobs(x[:size], y[:size], augment=True)
        self.val_set = Blobs(x[size:], y[size:], augment=False)

    def train_dataloader(self) -> DataLoader:
        if self.core:
            # repro_core: make_loader instead of DataLoader(shuffle=True): the order is a function of (seed, epoch),
            # what sample i draws in __getitem__ a function of (seed, epoch, i), whichever worker loads it
            return make_loader(self.train_set, self.batch_size, seed=self.seed, train=True,
                               num_workers=self.num_workers)
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=64, num_workers=self.num_workers)


class MLP(L.LightningModule):
    def __init__(self, lr: float, features: int = 16, hidden: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.lr = lr
        self.fc1 = nn.Linear(features, hidden)
        self.dropout = nn.Dropout(0.2)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(F.relu(self.fc1(x))))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch  # Lightning calls model.eval() before validation: dropout is off, nothing is drawn
        output = self(x)
        self.log("val_loss", F.cross_entropy(output, y), batch_size=len(y))
        self.log("val_accuracy", (output.argmax(dim=1) == y).float().mean(), batch_size=len(y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class KeyedRandomness(L.Callback):  # repro_core: the callback that keys the loader's epoch and each step's dropout
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # each epoch its own order, from (seed, epoch); Lightning calls set_epoch too: this says it
        trainer.train_dataloader.sampler.set_epoch(trainer.current_epoch)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        seed_step(self.seed, trainer.global_step)  # dropout's masks from (seed, step), not from what ran before


def main(args: argparse.Namespace) -> None:
    for name in ("lightning.pytorch", "lightning.fabric"):  # quiet: only the lines this script prints
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")  # lightning 2.6's own call of a name torch deprecated
    core = not args.without_core
    set_thread_count(args.threads)  # repro_core: a sum split over another number of threads adds in another order
    if core:
        configure_determinism("strict")  # repro_core: deterministic kernels, set before anything touches a GPU
        seed_everything(args.seed)  # repro_core: Python, NumPy and torch seeded before the first draw (the weights)
    else:
        L.seed_everything(args.seed, workers=True)  # the usual recipe: each worker seeded from (seed, worker, rank)

    data = BlobsData(args.seed, args.batch_size, args.num_workers, core=core)
    model = MLP(args.lr)
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=1,
        deterministic=True,
        # repro_core: keep make_loader's sampler; Lightning would otherwise swap in a DistributedSampler
        use_distributed_sampler=not core,
        callbacks=[KeyedRandomness(args.seed)] if core else [],  # repro_core: see KeyedRandomness above
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=data)
    metrics = trainer.callback_metrics
    print(f"train_loss {metrics['train_loss'].item():.6f} val_loss {metrics['val_loss'].item():.6f} "
          f"val_accuracy {metrics['val_accuracy'].item():.6f}")
    print(f"weights_sha256 {state_dict_sha256(model.state_dict())}")  # repro_core: equal hashes, equal weights


if __name__ == "__main__":
    main(parse_args())
