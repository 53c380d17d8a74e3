"""What reproducibility costs, measured side by side on the CPU.

    python benchmarks/run.py [--quick] [--json FILE]

Bakes the template with its defaults into a scratch folder, imports the baked package, and
measures, in this one process, alternating the contenders and reporting medians of the repeats:

  loop_vs_plain      steps/s of the generated training step and loader against a minimal
                     hand-written loop (plain DataLoader, the same model, data and batch size)
  strict_vs_off      the generated loop under --deterministic strict against off
  loader_vs_plain_0_workers, loader_vs_plain_2_workers
                     samples/s of the seeded loader against a plain shuffling DataLoader over the
                     same images and augmentation (drawn from the global generators)
  lightning_vs_ours  the same model through lightning.Trainer(deterministic=True), steps/s relative
                     to ours (only where lightning is installed)
  checkpoint_ms      milliseconds per checkpoint save of the example model (atomic, fsynced)
  strict_import_seconds  the one-off start-up cost of torch.use_deterministic_algorithms(True)
  bake_seconds, test_suite_seconds
                     baking the template; the generated project's whole test suite

Ratios above 1 mean ours is faster. Every figure in the README's benchmark table comes from here.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import io
import json
import logging
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "my_project"
BATCH = 64


def bake(folder: Path) -> tuple[Path, float]:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(folder), str(ROOT)],
                   check=True, capture_output=True)
    return folder / PACKAGE, time.perf_counter() - start


class PlainAugmented(Dataset):
    """The same images and augmentation as the baked dataset, drawn the usual way: from the global
    generators, integer indices, no epoch. What most projects write."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, augment) -> None:
        self.images, self.labels, self.augment = torch.from_numpy(images), torch.from_numpy(labels), augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        image = self.images[index].numpy()
        contrast = random.uniform(0.8, 1.2)
        shift = np.random.randint(-1, 2, size=2)
        noise = np.random.normal(0.0, 0.05, size=image.shape).astype(np.float32)
        return torch.from_numpy(self.augment(image, contrast, shift, noise)), self.labels[index]


def median_rate(measure, repeats: int) -> float:
    return statistics.median(measure() for _ in range(repeats))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats (under 3 minutes)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    steps, repeats, epochs = (60, 3, 2) if args.quick else (200, 7, 4)

    scratch = Path(tempfile.mkdtemp(prefix="repro-bench-"))
    project, bake_seconds = bake(scratch)
    sys.path.insert(0, str(project / "src"))
    data = importlib.import_module(f"{PACKAGE}.data")
    train = importlib.import_module(f"{PACKAGE}.train")
    repro = importlib.import_module(f"{PACKAGE}.utils.repro")
    checkpoint = importlib.import_module(f"{PACKAGE}.checkpoint")
    model_module = importlib.import_module(f"{PACKAGE}.model")
    torch.set_num_threads(1)  # as the generated project does, for both contenders

    (images, labels), _ = data.split(*data.load_arrays("synthetic", 0), 0)
    ours_set = data.ImageDataset(images, labels, seed=0, train=True)
    plain_set = PlainAugmented(images, labels, data.augment)
    device = torch.device("cpu")

    def new_model_and_optimizer():
        model = model_module.Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=10 * steps)
        return model, optimizer, scheduler

    def ours_steps_per_second() -> float:
        """The generated loop: seeded loader, train_one_step, a metrics row per step."""
        model, optimizer, scheduler = new_model_and_optimizer()
        loader = data.make_loader(ours_set, BATCH, seed=0, shuffle=True)
        rows = io.StringIO()
        done, epoch, start = 0, 0, time.perf_counter()
        while done < steps:
            loader.sampler.set_epoch(epoch)
            for batch in loader:
                loss, accuracy = train.train_one_step(model, batch, optimizer, scheduler, device)
                rows.write(f"{epoch},{done},train,{loss!r},{accuracy!r}\n")
                done += 1
                if done == steps:
                    break
            epoch += 1
        return steps / (time.perf_counter() - start)

    def plain_steps_per_second() -> float:
        """A minimal hand-written loop over a plain shuffling DataLoader."""
        model, optimizer, scheduler = new_model_and_optimizer()
        loader = DataLoader(plain_set, batch_size=BATCH, shuffle=True)
        model.train()
        done, start = 0, time.perf_counter()
        while done < steps:
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                scheduler.step()
                done += 1
                if done == steps:
                    break
        return steps / (time.perf_counter() - start)

    def loader_samples_per_second(make, num_workers: int) -> float:
        loader = make(num_workers)
        count, start = 0, time.perf_counter()
        for epoch in range(epochs):
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(epoch)
            for x, _ in loader:
                count += len(x)
        return count / (time.perf_counter() - start)

    def ours_loader(num_workers: int) -> DataLoader:
        return data.make_loader(ours_set, BATCH, seed=0, shuffle=True, num_workers=num_workers)

    def plain_loader(num_workers: int) -> DataLoader:
        return DataLoader(plain_set, batch_size=BATCH, shuffle=True, num_workers=num_workers)

    results: dict[str, object] = {}
    rates: dict[str, list[float]] = {k: [] for k in ("ours_off", "plain", "ours_strict")}
    for _ in range(repeats):  # alternate the contenders, so drift in the machine hits all alike
        repro.configure_determinism("off")
        rates["ours_off"].append(ours_steps_per_second())
        rates["plain"].append(plain_steps_per_second())
        repro.configure_determinism("strict")
        rates["ours_strict"].append(ours_steps_per_second())
        repro.configure_determinism("off")
    medians = {k: statistics.median(v) for k, v in rates.items()}
    results["loop_vs_plain"] = medians["ours_off"] / medians["plain"]
    results["strict_vs_off"] = medians["ours_strict"] / medians["ours_off"]
    results["steps_per_second"] = medians

    for workers in (0, 2):
        ours, plain = [], []
        for _ in range(repeats):
            ours.append(loader_samples_per_second(ours_loader, workers))
            plain.append(loader_samples_per_second(plain_loader, workers))
        results[f"loader_vs_plain_{workers}_workers"] = statistics.median(ours) / statistics.median(plain)
        results[f"loader_samples_per_second_{workers}_workers"] = {
            "ours": statistics.median(ours), "plain": statistics.median(plain)}

    lightning_rates = [lightning_steps_per_second(model_module.Net, plain_set, steps) for _ in range(repeats)]
    results["lightning_vs_ours"] = (statistics.median(lightning_rates) / medians["ours_strict"]
                                    if None not in lightning_rates else None)

    model, optimizer, scheduler = new_model_and_optimizer()
    folder = scratch / "checkpoints"
    times = []
    for step in range(1, 2 * repeats + 2):
        start = time.perf_counter()
        checkpoint.save_checkpoint(folder, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "rng": repro.capture_rng_state(), "step": step, "epoch": 0, "batch": step})
        times.append(time.perf_counter() - start)
    results["checkpoint_ms"] = 1000 * statistics.median(times)

    probe = ("import time, torch; t = time.perf_counter(); torch.use_deterministic_algorithms(True); "
             "print(time.perf_counter() - t)")
    results["strict_import_seconds"] = statistics.median(
        float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
        for _ in range(3))

    results["bake_seconds"] = bake_seconds
    start = time.perf_counter()
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project,
                           capture_output=True, text=True)
    results["test_suite_seconds"] = time.perf_counter() - start
    results["test_suite_summary"] = suite.stdout.strip().splitlines()[-1] if suite.stdout.strip() else ""
    results["machine"] = {
        "date": datetime.date.today().isoformat(), "platform": platform.platform(), "cpus": _cpu_count(),
        "python": platform.python_version(), "torch": torch.__version__,
        "command": " ".join(["python", "benchmarks/run.py", *sys.argv[1:]]),
    }

    for key, value in results.items():
        if isinstance(value, float):
            print(f"{key:32s} {value:10.3f}")
        else:
            print(f"{key:32s} {value}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if suite.returncode == 0 else 1


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def lightning_steps_per_second(net, dataset, steps: int) -> float | None:
    """Steps/s of lightning.Trainer(deterministic=True) on the same model and data (compared with
    ours under strict, its closest equivalent), set-up excluded. None where lightning is missing."""
    try:
        import lightning
    except ImportError:
        return None
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)  # its banners, once per repeat
    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net()

        def training_step(self, batch, _):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)

    class StepTimer(lightning.Callback):
        """Times from the first batch on, so that Lightning's one-off set-up is not counted."""

        def on_train_batch_start(self, trainer, module, batch, index):
            if index == 0 and trainer.global_step == 0:
                self.start = time.perf_counter()

    timer = StepTimer()
    trainer = lightning.Trainer(deterministic=True, max_steps=steps, accelerator="cpu", devices=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                callbacks=[timer])
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    trainer.fit(Module(), loader)
    return steps / (time.perf_counter() - timer.start)


if __name__ == "__main__":
    sys.exit(main())
