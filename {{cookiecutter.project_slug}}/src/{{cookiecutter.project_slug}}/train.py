"""Trains the model reproducibly; every run writes a folder that records what it did (runs.py).

    python -m {{ cookiecutter.project_slug }}.train --seed 42 --out runs/a
    python -m {{ cookiecutter.project_slug }}.train --seed 42 --out runs/b   # the same weights_sha256 as runs/a
    python -m {{ cookiecutter.project_slug }}.train --out runs/a --resume    # after a crash or preemption
    torchrun --standalone --nproc-per-node 2 -m {{ cookiecutter.project_slug }}.train --out runs/ddp

Read main() from the top: determinism, seed, data, model, optimizer; then for each epoch: train
one epoch, evaluate, checkpoint; then the summary. Your data and model go in data.py
(make_datasets) and model.py (make_model); nothing below is specific to the example.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from .checkpoint import TrainingState, save_checkpoint
from .config import PROG, Config
from .data import make_datasets
from .model import make_model
from .runs import MetricsLog, write_result
from .start import Plan, device_and_folder_problem, plan_run, refuse_if, start_run_folder
from .tracking import make_trackers
from .utils import distributed
from .utils.device import to_device
from .utils.loader import make_loader
from .utils.precision import autocast, compile_failure, compile_model, make_scaler
from .utils.repro import (
    configure_determinism,
    explain_nondeterministic_error,
    restore_rng_state,
    seed_everything,
)
from .utils.signals import StopSignals


def main(argv: list[str] | None = None) -> int:
    plan = plan_run(argv)  # every check of the input first: a mistake gets one line and exit 2
    if plan is None:
        return 0  # --resume of a finished run: nothing to do
    config = plan.config
    # 1. Determinism before anything touches the GPU: CUDA reads CUBLAS_WORKSPACE_CONFIG once, as it starts.
    configure_determinism(config.deterministic)
    # 2. A fixed thread count: intra-op parallelism splits reductions by thread, so the default
    #    (one thread per core) would make results depend on the machine.
    torch.set_num_threads(config.threads)
    # 3. Mixed precision and compilation depend on the device: checked now that CUDA may start.
    refuse_if(device_and_folder_problem(plan))
    if config.world_size > 1:
        distributed.start(plan.device)
    try:
        return train(plan)
    except RuntimeError as error:  # strict mode refused an op, or compiling failed: one line, not a traceback
        explanation = explain_nondeterministic_error(error, plan.device.type)
        if explanation is None and compile_failure(error) is None:
            raise
        print(f"{PROG}: error: {explanation or compile_failure(error)}", file=sys.stderr)
        return 1 if explanation else 2
    finally:
        distributed.stop()


def train(plan: Plan) -> int:
    config, device, out = plan.config, plan.device, plan.out
    is_main = distributed.rank() == 0
    # 4. Seeds last, right before the first draw: the model's initial weights. Every rank starts
    #    from the same weights.
    seed_everything(config.seed)
    train_set, val_set = make_datasets(config)
    train_loader, val_loader = make_loaders(train_set, val_set, config)
    model = make_model(config).to(device)
    optimizer, scheduler = make_optimizer(model, config, steps=config.epochs * len(train_loader))
    state = TrainingState(model, optimizer, scheduler, make_scaler(config.precision, device))
    log = MetricsLog(out / "metrics.csv", rows=0, writes=is_main)
    if plan.checkpoint is not None:
        state.load_checkpoint(plan.checkpoint)
        log.rows = state.metrics_rows
        # Last: building the data and the model drew random numbers too.
        restore_rng_state(plan.checkpoint["rng"][distributed.rank()])
    start_run_folder(plan, log, is_main)
    log.trackers = make_trackers(config, out, is_main)  # after the folder is ready: --tensorboard writes there

    started, result = time.perf_counter(), None
    with StopSignals() as signals, log:
        def stop_here() -> bool:
            """After each step: checkpoint when due; True when the run must stop now."""
            stop = distributed.any_rank(signals.signum is not None, device) or state.step == plan.stop_after_steps
            every, end_of_epoch = config.checkpoint_every, state.batch == len(train_loader)
            if stop or (every and state.step % every == 0 and not end_of_epoch):
                plan.last_checkpoint = checkpoint(state, config, plan, log, started)
            return stop

        model_to_train = prepare_for_training(model, config, device)
        while state.epoch < config.epochs:
            train_loss = train_one_epoch(model_to_train, train_loader, state, log, device, config.precision, stop_here)
            if train_loss is None:
                return stopped(plan, signals.signum, state.step, is_main)
            result = None
            if state.epoch == config.epochs - 1 or (config.eval_every and (state.epoch + 1) % config.eval_every == 0):
                result = evaluate(model, val_loader, device, config.precision)
                log.write(state.epoch, state.step, "val", result["loss"], result["accuracy"])
            report_epoch(state, config, train_loss, result)
            state.epoch, state.batch = state.epoch + 1, 0
            checkpoint(state, config, plan, log, started)

    if result is None:  # resumed from the checkpoint after the last epoch, whose evaluation was
        result = evaluate(model, val_loader, device, config.precision)  # not saved; evaluating again changes nothing
    seconds = state.train_seconds + time.perf_counter() - started
    if is_main:
        summary = write_result(out, plan.config, plan.device, model.state_dict(), state.step, seconds, result)
        print(f"weights_sha256 {summary['weights_sha256']}  val_accuracy {result['accuracy']:.4f}  "
              f"train_seconds {seconds:.1f}  -> {out}")
    return 0


def make_optimizer(model: nn.Module, config: Config, steps: int):
    """SGD with momentum, and a one-cycle learning-rate schedule over all `steps` of the run."""
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                weight_decay=config.weight_decay)
    return optimizer, torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr, total_steps=steps)


def make_loaders(train_set: Dataset, val_set: Dataset, config: Config) -> tuple[DataLoader, DataLoader]:
    """Loaders whose order and random draws are functions of the seed, whatever the worker count
    (see utils/loader.py); under torchrun each rank loads its share."""
    loading = {"num_workers": config.num_workers, "persistent_workers": config.persistent_workers,
               "prefetch_factor": config.prefetch_factor, "rank": distributed.rank(), "world_size": config.world_size}
    return (make_loader(train_set, config.batch_size, config.seed, train=True, **loading),
            make_loader(val_set, config.val_batch_size, config.seed, train=False, **loading))


def report_epoch(state: TrainingState, config: Config, train_loss: float, result: dict | None) -> None:
    if distributed.rank() != 0:
        return
    line = f"epoch {state.epoch + 1}/{config.epochs}  step {state.step}  train_loss {train_loss:.4f}"
    if result is not None:
        line += f"  val_loss {result['loss']:.4f}  val_accuracy {result['accuracy']:.4f}"
    print(line, flush=True)


def prepare_for_training(model: nn.Module, config: Config, device: torch.device) -> nn.Module:
    """What the loop trains: DistributedDataParallel under torchrun, compiled with --compile.
    Evaluation uses the plain model: its weights are the same tensors."""
    wrapped = distributed.wrap(model, device)
    return compile_model(wrapped) if config.compile else wrapped


def train_one_epoch(model: nn.Module, loader: DataLoader, state: TrainingState, log: MetricsLog,
                    device: torch.device, precision: str, stop_here: Callable[[], bool]) -> float | None:
    """Trains from `state`'s position to the end of its epoch. Returns the mean training loss of
    the steps it ran, or None if stop_here() asked to stop early."""
    model.train()
    loader.sampler.set_epoch(state.epoch, start=state.batch * loader.batch_size)
    losses = []
    progress = tqdm(loader, desc=f"epoch {state.epoch + 1}", leave=False, disable=not sys.stderr.isatty())
    for batch in progress:
        inputs, targets = to_device(batch, device)
        with autocast(precision, device):
            outputs = model(inputs)
            # F.cross_entropy, like nn.CrossEntropyLoss(), holds no parameters: nothing to move to the device.
            loss = F.cross_entropy(outputs, targets)
        state.optimizer.zero_grad(set_to_none=True)
        state.scaler.scale(loss).backward()  # with fp32 and bf16 the scaler passes the loss through
        state.scaler.step(state.optimizer)
        state.scaler.update()
        state.scheduler.step()
        state.step, state.batch = state.step + 1, state.batch + 1
        accuracy = (outputs.argmax(dim=1) == targets).float().mean()
        loss_value, accuracy_value = distributed.mean_over_ranks([loss.item(), accuracy.item()], device)
        log.write(state.epoch, state.step, "train", loss_value, accuracy_value)
        losses.append(loss_value)
        if stop_here():
            progress.close()
            return None
    return sum(losses) / max(len(losses), 1)


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device, precision: str = "fp32") -> dict[str, float]:
    """Mean loss and accuracy over `loader`.

    Runs in eval mode (dropout off, BatchNorm uses its running statistics and does not update
    them) without gradients, draws no random number, and restores the mode it found.
    """
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    try:
        with torch.no_grad():
            for batch in loader:
                inputs, targets = to_device(batch, device)
                with autocast(precision, device):
                    outputs = model(inputs)
                    loss_sum += F.cross_entropy(outputs, targets, reduction="sum").item()
                correct += int((outputs.argmax(dim=1) == targets).sum())
                count += len(targets)
    finally:
        model.train(was_training)
    # Under torchrun each rank saw its own share: add them up.
    loss_sum, correct, count = distributed.sum_over_ranks([loss_sum, correct, count], device)
    return {"loss": loss_sum / count, "accuracy": correct / count}


def checkpoint(state: TrainingState, config: Config, plan: Plan, log: MetricsLog, started: float):
    """Every rank takes part (their RNG states are gathered); rank 0 writes. Returns the path."""
    rng_states = distributed.rng_states_of_all_ranks()
    state.metrics_rows = log.rows
    log.sync()  # the rows the checkpoint counts are on disk before it is
    seconds = state.train_seconds + time.perf_counter() - started
    if distributed.rank() != 0:
        return None
    return save_checkpoint(plan.out / "checkpoints", state.to_checkpoint(rng_states, config.to_dict(), seconds))


def stopped(plan: Plan, signum: int | None, step: int, is_main: bool) -> int:
    """Says where the run stopped and how to continue; the exit status (128 + signal number)."""
    again = (f"{PROG} --out {plan.out} --resume" if plan.config.world_size == 1
             else "the same torchrun command plus --resume")
    if signum is None and step == plan.stop_after_steps:
        if is_main:
            print(f"stopped after step {step} as asked, checkpoint {plan.last_checkpoint}; continue with: {again}")
        return 0
    signum = signum or signal.SIGTERM  # a rank told by another rank
    if is_main:  # train_one_epoch has closed its progress bar, so this starts on a fresh line
        print(f"{signal.Signals(signum).name}: stopped after step {step}, checkpoint {plan.last_checkpoint}; "
              f"continue with: {again}", file=sys.stderr)
    return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
