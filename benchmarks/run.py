"""What reproducibility costs, measured side by side on the CPU.

    python benchmarks/run.py [--quick] [--json FILE]

Bakes the template with its defaults into a scratch folder, imports the baked package, and
measures, in this one process, alternating the contenders and reporting medians of the repeats:

  loop_vs_plain      steps/s of the project's own per-epoch function (train.train_one_epoch, with
                     its loader and metrics log) against a minimal hand-written loop (a plain
                     shuffling DataLoader over the same dataset, the same model and batch size)
  strict_vs_off      the generated loop under --deterministic strict against off
  loader_vs_plain_0_workers, loader_vs_plain_2_workers
                     samples/s of the project's loader (keyed randomness) against a plain shuffling
                     DataLoader over the same example dataset, whose augmentation draws from the
                     global generators
  slow_loader_vs_plain_0_workers, slow_loader_vs_plain_2_workers
                     the same over a dataset whose __getitem__ costs about 200 µs (a realistic
                     image decode, simulated by a busy wait)
  bf16_vs_fp32       steps/s of the loop with --precision bf16 against fp32 (on the CPU)
  compile_vs_eager   steps/s of the loop with --compile, after the first step, against eager
                     (both under --deterministic strict)
  compile_seconds    the first compiled step, which compiles the model
  study_jobs2_vs_serial
                     wall time of `study --seeds 0-4 --jobs 2` against `--jobs 1`, the default run
                     (lower is better: the target is at most 0.65 on two cores)
  keyed_randomness_us_per_sample
                     what the keyed randomness adds per sample in the main process, in µs:
                     the difference of the two loaders' time per sample, 0 workers, example data
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
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


class Slow(Dataset):
    """A dataset whose __getitem__ costs about `microseconds` more: a decode, simulated."""

    def __init__(self, dataset: Dataset, microseconds: int = 200) -> None:
        self.dataset, self.nanoseconds = dataset, microseconds * 1000

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        until = time.perf_counter_ns() + self.nanoseconds
        while time.perf_counter_ns() < until:
            pass
        return self.dataset[index]


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
    config_module = importlib.import_module(f"{PACKAGE}.config")
    data = importlib.import_module(f"{PACKAGE}.data")
    train = importlib.import_module(f"{PACKAGE}.train")
    repro = importlib.import_module(f"{PACKAGE}.utils.repro")
    loader_module = importlib.import_module(f"{PACKAGE}.utils.loader")
    precision_module = importlib.import_module(f"{PACKAGE}.utils.precision")
    checkpoint = importlib.import_module(f"{PACKAGE}.checkpoint")
    runs = importlib.import_module(f"{PACKAGE}.runs")
    model_module = importlib.import_module(f"{PACKAGE}.model")
    torch.set_num_threads(1)  # as the generated project does, for both contenders

    config = config_module.Config(seed=0, dataset="synthetic")
    train_set, _ = data.make_datasets(config)
    slow_set = Slow(train_set)
    device = torch.device("cpu")

    def new_state(precision: str = "fp32"):
        model = model_module.make_model(config)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=10 * steps)
        return checkpoint.TrainingState(model, optimizer, scheduler, precision_module.make_scaler(precision, device))

    def ours_steps_per_second(precision: str = "fp32", state=None, model=None) -> float:
        """The project's own train_one_epoch: its loader, its step, a metrics row per step. With
        `state` and `model` (a compiled wrapper of state.model), continues from that state."""
        state = state if state is not None else new_state(precision)
        model, first = (model if model is not None else state.model), state.step
        loader = loader_module.make_loader(train_set, BATCH, seed=0, train=True)
        with runs.MetricsLog(scratch / "metrics.csv", rows=0, writes=True) as log:
            start = time.perf_counter()
            while state.step < first + steps:
                train.train_one_epoch(model, loader, state, log, device, precision, lambda: state.step == first + steps)
                state.epoch, state.batch = state.epoch + 1, 0
            return steps / (time.perf_counter() - start)

    def compiled_rates() -> tuple[float, float]:
        """(seconds of the first step, which compiles; steps/s after it) under --compile."""
        state = new_state()
        compiled = precision_module.compile_model(state.model)
        loader = loader_module.make_loader(train_set, BATCH, seed=0, train=True)
        with runs.MetricsLog(scratch / "metrics.csv", rows=0, writes=True) as log:
            start = time.perf_counter()
            train.train_one_epoch(compiled, loader, state, log, device, "fp32", lambda: True)
            compile_seconds = time.perf_counter() - start
        state.scheduler = torch.optim.lr_scheduler.LambdaLR(state.optimizer, lambda step: 1.0)  # no step limit
        rates = [ours_steps_per_second(state=state, model=compiled) for _ in range(repeats)]
        return compile_seconds, statistics.median(rates)

    def plain_steps_per_second() -> float:
        """A minimal hand-written loop over a plain shuffling DataLoader."""
        state = new_state()
        model, optimizer, scheduler = state.model, state.optimizer, state.scheduler
        loader = DataLoader(train_set, batch_size=BATCH, shuffle=True)
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

    def loader_samples_per_second(loader: DataLoader, epochs: int) -> float:
        count, start = 0, time.perf_counter()
        for epoch in range(epochs):
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(epoch)
            for x, _ in loader:
                count += len(x)
        return count / (time.perf_counter() - start)

    def ours_loader(dataset: Dataset, num_workers: int) -> DataLoader:
        return loader_module.make_loader(dataset, BATCH, seed=0, train=True, num_workers=num_workers)

    def plain_loader(dataset: Dataset, num_workers: int) -> DataLoader:
        return DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=num_workers)

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

    bf16, fp32 = [], []
    for _ in range(repeats):
        bf16.append(ours_steps_per_second("bf16"))
        fp32.append(ours_steps_per_second("fp32"))
    results["bf16_vs_fp32"] = statistics.median(bf16) / statistics.median(fp32)
    repro.configure_determinism("strict")
    results["compile_seconds"], compiled_rate = compiled_rates()
    eager_rate = statistics.median(ours_steps_per_second() for _ in range(repeats))
    results["compile_vs_eager"] = compiled_rate / eager_rate
    repro.configure_determinism("off")

    for name, dataset, loader_epochs in (("", train_set, epochs), ("slow_", slow_set, 1)):
        for workers in (0, 2):
            ours, plain = [], []
            for _ in range(repeats):
                ours.append(loader_samples_per_second(ours_loader(dataset, workers), loader_epochs))
                plain.append(loader_samples_per_second(plain_loader(dataset, workers), loader_epochs))
            results[f"{name}loader_vs_plain_{workers}_workers"] = statistics.median(ours) / statistics.median(plain)
            results[f"{name}loader_samples_per_second_{workers}_workers"] = {
                "ours": statistics.median(ours), "plain": statistics.median(plain)}
    rates_0 = results["loader_samples_per_second_0_workers"]
    results["keyed_randomness_us_per_sample"] = 1e6 * (1 / rates_0["ours"] - 1 / rates_0["plain"])

    lightning_rates = [lightning_steps_per_second(lambda: model_module.make_model(config), train_set, steps)
                       for _ in range(repeats)]
    results["lightning_vs_ours"] = (statistics.median(lightning_rates) / medians["ours_strict"]
                                    if None not in lightning_rates else None)

    state = new_state()
    folder = scratch / "checkpoints"
    times = []
    for step in range(1, 2 * repeats + 2):
        start = time.perf_counter()
        state.step = step
        checkpoint.save_checkpoint(folder, state.to_checkpoint([repro.capture_rng_state()], config.to_dict(), 0.0))
        times.append(time.perf_counter() - start)
    results["checkpoint_ms"] = 1000 * statistics.median(times)

    probe = ("import time, torch; t = time.perf_counter(); torch.use_deterministic_algorithms(True); "
             "print(time.perf_counter() - t)")
    results["strict_import_seconds"] = statistics.median(
        float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
        for _ in range(3))

    study_seconds = {}
    for jobs in (1, 2):  # 5 seeds of the default run, one after another and two at a time
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", f"{PACKAGE}.study", "--seeds", "0-4", "--out",
                        str(scratch / f"study_jobs{jobs}"), "--jobs", str(jobs), "--device", "cpu"],
                       cwd=project, env={**os.environ, "PYTHONPATH": str(project / "src")},
                       check=True, capture_output=True)
        study_seconds[jobs] = time.perf_counter() - start
    results["study_jobs2_vs_serial"] = study_seconds[2] / study_seconds[1]
    results["study_seconds"] = {"jobs_1": study_seconds[1], "jobs_2": study_seconds[2]}

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
