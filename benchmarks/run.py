"""What reproducibility costs, measured side by side on the CPU.

    python benchmarks/run.py                 # about 6 minutes (two idle cores); writes benchmarks/results.json
    python benchmarks/run.py --quick         # fewer steps and repeats, no test-suite run (about 1.5 minutes)
    python benchmarks/run.py --smoke --json /tmp/smoke.json   # every part once, tiny (seconds): a test of the script

Bakes the template with its defaults into a scratch folder, imports the baked package, and
measures in this one process, alternating the contenders so that drift in a shared machine hits
all alike, medians of the repeats. Ratios above 1 mean ours is faster.

The targets (issue 22), all on the example task:
  loop_vs_plain      steps/s of the project's training loop against the loop a user writes. Ours:
                     train.py's train_step over the keyed loader's batches, as train_epochs takes
                     them (the generators seeded before each micro-batch, the task's batch_sums and
                     metrics_from_sums, optimizer.step(), the schedule), every step's
                     metrics row kept by StepRows and written to metrics.csv every --log-every steps,
                     and the stop check train_epochs makes after each step. Plain: a shuffling
                     DataLoader over the same dataset, the same model, optimizer and schedule, the
                     loss (cross-entropy) and nothing else. Neither evaluates nor checkpoints
                     (checkpoint_ms is apart). Both under --deterministic off, one thread.
  strict_vs_off      our loop under --deterministic strict against off
  nonfinite_check_vs_none, folder_lock_us
                     our loop against the same with its per-step check of a finite loss and
                     gradients replaced by a constant; the one-off lock of a run folder, in µs
  loader_vs_plain_0_workers, loader_vs_plain_2_workers
                     samples/s of the project's loader (utils/data.py: make_loader) against a plain
                     shuffling DataLoader over the example's training set, whose augmentation draws
                     from all three global generators (so all three are seeded before each sample)
  slow_loader_vs_plain_0_workers, slow_loader_vs_plain_2_workers
                     the same over the example made 200 µs slower a sample (an image decode,
                     simulated by a busy wait)
Also measured:
  torch_only_loop_vs_plain, torch_only_loader_vs_plain_0_workers, ..._2_workers
                     loop_vs_plain and the loaders' ratios over a dataset whose augmentation draws
                     from torch alone (as torchvision's transforms do) and says so:
                     draws_from = ("torch",), so that only torch's generator is seeded
  keyed_randomness_us_per_sample
                     where the keyed loader's time per sample goes, in µs of this thread's CPU time
                     (time.thread_time: what other processes on a shared machine take is not
                     counted): the example's __getitem__ alone, and what each part adds to it: the
                     key (keyed_seed), seeding Python's random, NumPy's, torch's, all three
  bf16_vs_fp32       our loop under --precision bf16 against fp32 (on the CPU)
  compile_vs_eager, compile_seconds
                     our loop under --compile (after its first step) against eager, both strict;
                     the first compiled step, which compiles
  lightning_vs_ours  lightning.Trainer(deterministic=True) on the same model and data, steps/s
                     relative to our loop under strict (only where lightning is installed)
  checkpoint_ms      one checkpoint of the example model (atomic, fsynced)
  strict_import_seconds  the one-off start-up cost of torch.use_deterministic_algorithms(True) in a bare
                     process (it imports the compiler, which a torch.optim optimizer imports anyway)
  study_jobs2_vs_serial  wall time of `study --seeds 0-4 --jobs 2` against `--jobs 1` (lower is better)
  bake_seconds, test_suite_seconds
                     baking the template; the generated project's whole plain test suite
  machine            date and time, platform, CPUs, Python, torch, the command, the load average
                     (1, 5, 15 minutes) before and after: how idle the machine was

--quick runs every part but the generated test suite (whose run alone takes minutes), on fewer
steps and repeats. --smoke runs every part above once on a few steps and samples, except the slow
ones (compile, study, the test suite, lightning): its figures mean nothing, it only shows that the
script works.
Every figure in the READMEs' benchmark tables comes from here.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "my_project"
MODES = {  # steps a loop is timed for, repeats, epochs a loader is timed for, samples (0: all)
    "full": dict(steps=200, repeats=7, loader_epochs=2, samples=0),
    "quick": dict(steps=60, repeats=3, loader_epochs=1, samples=0),
    "smoke": dict(steps=3, repeats=1, loader_epochs=1, samples=192),
}


def bake(folder: Path) -> tuple[Path, float]:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(folder), str(ROOT)],
                   check=True, capture_output=True)
    return folder / PACKAGE, time.perf_counter() - start


def import_package(project: Path) -> SimpleNamespace:
    """The baked package's modules that the benchmarks use, by short name."""
    sys.path.insert(0, str(project / "src"))
    names = ("task", "config", "train", "engine.loop", "utils.data", "utils.repro", "engine.checkpoint", "engine.optim",
             "engine.precision", "engine.run_folder", "engine.distributed", "engine.contract")
    return SimpleNamespace(**{name.rsplit(".", 1)[-1]: importlib.import_module(f"{PACKAGE}.{name}") for name in names})


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


class TorchOnly(Dataset):
    """The example's images (an ImageDataset) with an augmentation of the same kind that draws from
    torch alone, as torchvision's transforms do, and says so."""

    draws_from = ("torch",)

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        image, label = self.dataset.images[index], self.dataset.labels[index]
        dy, dx = torch.randint(-1, 2, (2,)).tolist()
        contrast = 0.8 + 0.4 * float(torch.rand(()))
        return torch.roll(image, shifts=(dy, dx), dims=(-2, -1)) * contrast + 0.05 * torch.randn(image.shape), label


Rounds = dict[str, list[float]]


def alternate(contenders: dict[str, Callable[[], float]], repeats: int) -> Rounds:
    """Each contender's figure in each of `repeats` rounds, the contenders taking turns in a round."""
    values: Rounds = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, measure in contenders.items():
            values[name].append(measure())
    return values


def ratio(rounds: Rounds, a: str, b: str) -> float:
    """The median over rounds of a's figure over b's in the same round: a machine that slows down
    between rounds slows both alike."""
    return statistics.median(x / y for x, y in zip(rounds[a], rounds[b], strict=True))


def medians(rounds: Rounds) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in rounds.items()}


class Bench:
    """The baked package, its example data and config, and the measurements that use them."""

    def __init__(self, pkg: SimpleNamespace, scratch: Path, device: torch.device, samples: int) -> None:
        self.pkg, self.scratch, self.device = pkg, scratch, device
        self.config = dataclasses.replace(pkg.config.Config(), device=device.type, deterministic="off")
        train_set, _ = pkg.task.make_datasets(self.config)
        self.example = train_set  # an ImageDataset: TorchOnly needs its images and labels
        self.train_set = Subset(train_set, range(samples)) if samples else train_set
        self.names: tuple[str, ...] | None = None

    # ---- the training loops ----------------------------------------------------------------------

    def new_model(self) -> torch.nn.Module:
        self.pkg.repro.seed_everything(self.config.seed)
        return self.pkg.task.make_model(self.config, self.example).to(self.device)

    def ours(self, steps: int, read_back_timer: list[float] | None = None, compiled: bool = False,
             dataset: Dataset | None = None, **changes) -> tuple[float, float]:
        """(seconds of the first step; steps/s of the `steps` after it) of the project's loop with
        the config's `changes`, over `dataset` (the example's training set by default).
        `read_back_timer` collects the seconds spent reading metrics back."""
        pkg, config, device = self.pkg, dataclasses.replace(self.config, **changes), self.device
        model = self.new_model()
        optimizer, scheduler = pkg.optim.make_optimizer(model, config, steps=steps + 1)
        state = pkg.checkpoint.TrainingState(model, optimizer, scheduler,
                                             pkg.precision.make_scaler(config.precision, device))
        trained = pkg.precision.compile_model(model) if compiled else model
        dataset = self.train_set if dataset is None else dataset
        loader = pkg.data.make_loader(dataset, config.micro_batch_size, config.seed, train=True)
        log = pkg.run_folder.MetricsLog(self.scratch / "metrics.csv", self.metric_names(), rows=0, writes=True)
        log.create()
        rows = pkg.loop.StepRows(log, pkg.task, device, config.log_every)
        read_back = pkg.loop.read_back
        if read_back_timer is not None:
            pkg.loop.read_back = timed(read_back, read_back_timer)
        try:
            with log:
                start = first = time.perf_counter()
                while state.step <= steps:
                    trained.train()
                    loader.sampler.set_epoch(state.epoch)
                    for micro_batches in pkg.loop.accumulation_windows(loader, config.accumulate):
                        sums, finite = pkg.train.train_step(trained, micro_batches, state, config, device)
                        rows.add(state.epoch, state.step, sums, finite)
                        if state.step == 1:
                            synchronize(device)
                            first = time.perf_counter()
                            if read_back_timer is not None:
                                read_back_timer.clear()  # the first step's, if any, is not timed
                        if pkg.distributed.any_rank(False) or state.step == steps + 1:
                            break
                    rows.flush()  # as train_epochs does at each epoch's end
                    state.epoch, state.epoch_step = state.epoch + 1, 0
                synchronize(device)
                return first - start, steps / (time.perf_counter() - first)
        finally:
            pkg.loop.read_back = read_back

    def plain(self, steps: int, dataset: Dataset | None = None) -> tuple[float, float]:
        """The same for the loop a user writes: a shuffling DataLoader, the loss, nothing else."""
        model = self.new_model()
        optimizer, scheduler = self.pkg.optim.make_optimizer(model, self.config, steps=steps + 1)
        dataset = self.train_set if dataset is None else dataset
        loader = DataLoader(dataset, batch_size=self.config.batch_size, shuffle=True)
        model.train()
        done, start = 0, time.perf_counter()
        while done <= steps:
            for inputs, targets in loader:
                inputs, targets = inputs.to(self.device), targets.to(self.device)
                loss = F.cross_entropy(model(inputs), targets)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                done += 1
                if done == 1:
                    synchronize(self.device)
                    first = time.perf_counter()
                if done == steps + 1:
                    break
        synchronize(self.device)
        return first - start, steps / (time.perf_counter() - first)

    def metric_names(self) -> tuple[str, ...]:
        """The columns of metrics.csv ('loss' first), as train.py gets them: from the task's check."""
        if self.names is None:
            loader = self.pkg.data.make_loader(self.train_set, 8, self.config.seed, train=False)
            self.names = self.pkg.contract.check_task(self.pkg.task, self.new_model(), loader, self.device, "fp32")
        return self.names

    def loops(self, steps: int, repeats: int) -> dict[str, object]:
        """loop_vs_plain, strict_vs_off and torch_only_loop_vs_plain: the five loops taking turns."""
        repro = self.pkg.repro

        def ours_in(mode: str) -> Callable[[], float]:
            def measure() -> float:
                repro.configure_determinism(mode)
                try:
                    return self.ours(steps, deterministic=mode)[1]
                finally:
                    repro.configure_determinism("off")
            return measure

        torch_only = self.torch_only()
        rates = alternate({"ours_off": ours_in("off"), "plain": lambda: self.plain(steps)[1],
                           "ours_strict": ours_in("strict"),
                           "ours_torch_only": lambda: self.ours(steps, dataset=torch_only)[1],
                           "plain_torch_only": lambda: self.plain(steps, dataset=torch_only)[1]}, repeats)
        return {"loop_vs_plain": ratio(rates, "ours_off", "plain"),
                "strict_vs_off": ratio(rates, "ours_strict", "ours_off"),
                "torch_only_loop_vs_plain": ratio(rates, "ours_torch_only", "plain_torch_only"),
                "steps_per_second": medians(rates)}

    def torch_only(self) -> Dataset:
        return restrict(TorchOnly(self.example), len(self.train_set))

    def safety_costs(self, steps: int, repeats: int) -> dict[str, object]:
        """What "nothing lost" costs: our loop against the same loop with the non-finite check
        replaced by a constant (the flag still rides on the rows' read-back, now never false), and
        the one-off lock of a run folder (taken and released), in µs."""
        train, check = self.pkg.train, self.pkg.train.finite_step

        def unchecked() -> float:
            train.finite_step = lambda loss, gradients: True
            try:
                return self.ours(steps)[1]
            finally:
                train.finite_step = check

        rates = alternate({"checked": lambda: self.ours(steps)[1], "unchecked": unchecked}, repeats)
        folder = self.scratch / "locked"
        folder.mkdir(exist_ok=True)
        lock_us = []
        for _ in range(max(5, repeats) * 20):
            start = time.perf_counter()
            assert self.pkg.run_folder.lock_folder(folder) is None
            self.pkg.run_folder.unlock_folder(folder)
            lock_us.append((time.perf_counter() - start) * 1e6)
        return {"nonfinite_check_vs_none": ratio(rates, "checked", "unchecked"),
                "folder_lock_us": statistics.median(lock_us)}

    def read_back_share(self, steps: int, repeats: int) -> dict[str, object]:
        """Steps/s of our loop reading the metrics back every step against every 50 (the default),
        and the share of the loop's time spent in the read-back (on a GPU: waiting for the device)."""
        shares: dict[int, list[float]] = {1: [], 50: []}

        def measure(every: int) -> Callable[[], float]:
            def run() -> float:
                spent: list[float] = []
                rate = self.ours(steps, read_back_timer=spent, log_every=every)[1]
                shares[every].append(sum(spent) * rate / steps)
                return rate
            return run

        rates = alternate({"log_every_1": measure(1), "log_every_50": measure(50)}, repeats)
        return {"log_every_50_vs_1": ratio(rates, "log_every_50", "log_every_1"),
                "read_back_share": {f"log_every_{every}": statistics.median(v) for every, v in shares.items()},
                "read_back_steps_per_second": medians(rates)}

    # ---- the loaders -----------------------------------------------------------------------------

    def loaders(self, epochs: int, repeats: int) -> dict[str, object]:
        """Keyed loader against plain DataLoader, samples/s, at 0 and 2 workers, on three datasets."""
        results: dict[str, object] = {}
        datasets = {"": self.train_set, "slow_": Slow(self.train_set),
                    "torch_only_": self.torch_only()}
        for prefix, dataset in datasets.items():
            for workers in (0, 2):
                rates = alternate({
                    "ours": lambda d=dataset, w=workers: samples_per_second(self.keyed_loader(d, w), epochs),
                    "plain": lambda d=dataset, w=workers: samples_per_second(self.plain_loader(d, w), epochs),
                }, repeats)
                results[f"{prefix}loader_vs_plain_{workers}_workers"] = ratio(rates, "ours", "plain")
                results[f"{prefix}loader_samples_per_second_{workers}_workers"] = medians(rates)
        return results

    def keyed_loader(self, dataset: Dataset, num_workers: int) -> DataLoader:
        return self.pkg.data.make_loader(dataset, self.config.batch_size, self.config.seed, train=True,
                                           num_workers=num_workers)

    def plain_loader(self, dataset: Dataset, num_workers: int) -> DataLoader:
        return DataLoader(dataset, batch_size=self.config.batch_size, shuffle=True, num_workers=num_workers)

    def keyed_randomness_profile(self, repeats: int) -> dict[str, float]:
        """µs of CPU time per sample: the example's __getitem__ alone, then what each part of the
        keyed randomness adds to it, measured in place (each variant seeds, then fetches). The
        least of many short rounds, as timeit advises: the other rounds were slowed by something
        else (on a shared machine, another process sharing the core's caches)."""
        repro, dataset = self.pkg.repro, self.train_set
        base = repro.derive_seed(self.config.seed, repro.Stream.TRAIN_SAMPLE)
        variants = {"getitem": None, "key": (), "random": ("random",), "numpy": ("numpy",), "torch": ("torch",),
                    "all_three": ("random", "numpy", "torch")}
        indices = range(min(len(dataset), 400))

        def per_sample(generators: tuple[str, ...] | None) -> Callable[[], float]:
            def run() -> float:
                start = time.thread_time_ns()
                for index in indices:
                    if generators is not None:
                        repro.seed_global_generators(repro.keyed_seed(base, 0, index), generators=generators)
                    dataset[index]
                return (time.thread_time_ns() - start) / len(indices) / 1000
            return run

        rounds = alternate({name: per_sample(generators) for name, generators in variants.items()}, 10 * repeats)
        least = {name: min(values) for name, values in rounds.items()}
        return {"getitem": least["getitem"],
                **{f"plus_{name}": least[name] - least["getitem"] for name in variants if name != "getitem"}}

    # ---- the rest --------------------------------------------------------------------------------

    def precision_and_compile(self, steps: int, repeats: int, compile_too: bool) -> dict[str, object]:
        rates = alternate({"bf16": lambda: self.ours(steps, precision="bf16")[1],
                           "fp32": lambda: self.ours(steps)[1]}, repeats)
        results: dict[str, object] = {"bf16_vs_fp32": ratio(rates, "bf16", "fp32")}
        if compile_too:
            self.pkg.repro.configure_determinism("strict")
            try:
                first, compiled = self.ours(steps, compiled=True, deterministic="strict")
                eager = statistics.median(self.ours(steps, deterministic="strict")[1] for _ in range(repeats))
            finally:
                self.pkg.repro.configure_determinism("off")
            results.update(compile_seconds=first, compile_vs_eager=compiled / eager)
        return results

    def checkpoint_ms(self, repeats: int) -> float:
        pkg, model = self.pkg, self.new_model()
        optimizer, scheduler = pkg.optim.make_optimizer(model, self.config, steps=10)
        scaler = pkg.precision.make_scaler("fp32", self.device)
        state = pkg.checkpoint.TrainingState(model, optimizer, scheduler, scaler)
        times = []
        for step in range(1, 2 * repeats + 2):
            state.step = step
            start = time.perf_counter()
            checkpoint = state.to_checkpoint(self.config.to_dict(), 0.0)
            pkg.checkpoint.save_checkpoint(self.scratch / "checkpoints", checkpoint)
            times.append(time.perf_counter() - start)
        return 1000 * statistics.median(times)


def restrict(dataset: Dataset, samples: int) -> Dataset:
    return dataset if samples >= len(dataset) else Subset(dataset, range(samples))


def timed(function: Callable, spent: list[float]) -> Callable:
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)
    return wrapper


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def samples_per_second(loader: DataLoader, epochs: int) -> float:
    count, start = 0, time.perf_counter()
    for epoch in range(epochs):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for inputs, _ in loader:
            count += len(inputs)
    return count / (time.perf_counter() - start)


def machine(mode: str, load_before: tuple[float, ...], started: float,
            script: str = "benchmarks/run.py") -> dict[str, object]:
    """What the figures were measured on, and how idle it was (load averages over 1, 5, 15 minutes)."""
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "platform": platform.platform(),
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "mode": mode,
            "command": " ".join(["python", script, *sys.argv[1:]]),
            "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
            "wall_seconds": time.perf_counter() - started}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="fewer steps and repeats, no test-suite run "
                       "(about 1.5 minutes)")
    speed.add_argument("--smoke", action="store_true", help="every fast part once, tiny: a test of the script")
    parser.add_argument("--json", type=Path, help="where to write the results (default: benchmarks/results.json; "
                        "--smoke writes only where this says)")
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    out = args.json or (None if args.smoke else ROOT / "benchmarks" / "results.json")
    load_before, started = os.getloadavg(), time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="repro-bench-") as scratch:
        results = measure(mode, Path(scratch))
    results["machine"] = machine(mode, load_before, started)

    for key, value in results.items():
        print(f"{key:40s} {value:10.3f}" if isinstance(value, float) else f"{key:40s} {value}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if results.get("test_suite_passed", True) else 1


def measure(mode: str, scratch: Path) -> dict[str, object]:
    """Every figure but `machine`, in the order the docstring gives them."""
    steps, repeats, loader_epochs, samples = MODES[mode].values()
    project, bake_seconds = bake(scratch)
    pkg = import_package(project)
    torch.set_num_threads(1)  # the project's default (--threads 1), for every contender
    pkg.repro.configure_determinism("off")
    bench = Bench(pkg, scratch, torch.device("cpu"), samples)

    results: dict[str, object] = {}
    results.update(bench.loops(steps, repeats))
    results.update(bench.safety_costs(steps, repeats))
    results.update(bench.loaders(loader_epochs, repeats))
    results["keyed_randomness_us_per_sample"] = bench.keyed_randomness_profile(repeats)
    results.update(bench.precision_and_compile(steps, repeats, compile_too=mode != "smoke"))
    results["lightning_vs_ours"] = None if mode == "smoke" else lightning_vs_ours(bench, steps, repeats)
    results["checkpoint_ms"] = bench.checkpoint_ms(repeats)
    results["strict_import_seconds"] = strict_import_seconds(1 if mode == "smoke" else 3)
    if mode != "smoke":
        results.update(study_seconds(project, scratch))
    if mode == "full":  # the generated suite takes minutes: --quick leaves it to the full run
        results.update(test_suite_seconds(project))
    results["bake_seconds"] = bake_seconds
    return results


def strict_import_seconds(repeats: int) -> float:
    probe = ("import time, torch; t = time.perf_counter(); torch.use_deterministic_algorithms(True); "
             "print(time.perf_counter() - t)")
    return statistics.median(
        float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
        for _ in range(repeats))


def study_seconds(project: Path, scratch: Path) -> dict[str, object]:
    """5 seeds of the default run, one after another and two at a time."""
    seconds = {}
    for jobs in (1, 2):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", f"{PACKAGE}.study", "--seeds", "0-4", "--out",
                        str(scratch / f"study_jobs{jobs}"), "--jobs", str(jobs), "--device", "cpu"],
                       cwd=project, env={**os.environ, "PYTHONPATH": str(project / "src")},
                       check=True, capture_output=True)
        seconds[jobs] = time.perf_counter() - start
    return {"study_jobs2_vs_serial": seconds[2] / seconds[1],
            "study_seconds": {"jobs_1": seconds[1], "jobs_2": seconds[2]}}


def test_suite_seconds(project: Path) -> dict[str, object]:
    start = time.perf_counter()
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project,
                           capture_output=True, text=True)
    return {"test_suite_seconds": time.perf_counter() - start, "test_suite_passed": suite.returncode == 0,
            "test_suite_summary": suite.stdout.strip().splitlines()[-1] if suite.stdout.strip() else ""}


def lightning_vs_ours(bench: Bench, steps: int, repeats: int) -> float | None:
    """Steps/s of lightning.Trainer(deterministic=True) on the same model and data against our loop
    under strict, its closest equivalent, set-up excluded. None where lightning is missing."""
    try:
        import lightning
    except ImportError:
        return None
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)  # its banners, once per repeat

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = bench.new_model()

        def training_step(self, batch, _):
            inputs, targets = batch
            return F.cross_entropy(self.net(inputs), targets)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)

    class StepTimer(lightning.Callback):
        """Times from the second batch on, as our loops are timed."""

        def on_train_batch_start(self, trainer, module, batch, index):
            if trainer.global_step == 1 and not hasattr(self, "start"):
                self.start = time.perf_counter()

    def lightning_rate() -> float:
        timer = StepTimer()
        trainer = lightning.Trainer(deterministic=True, max_steps=steps + 1, accelerator="cpu", devices=1,
                                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                    enable_model_summary=False, callbacks=[timer])
        trainer.fit(Module(), DataLoader(bench.train_set, batch_size=bench.config.batch_size, shuffle=True))
        return steps / (time.perf_counter() - timer.start)

    def ours_strict() -> float:
        bench.pkg.repro.configure_determinism("strict")
        try:
            return bench.ours(steps, deterministic="strict")[1]
        finally:
            bench.pkg.repro.configure_determinism("off")

    return ratio(alternate({"lightning": lightning_rate, "ours": ours_strict}, repeats), "lightning", "ours")


if __name__ == "__main__":
    sys.exit(main())
