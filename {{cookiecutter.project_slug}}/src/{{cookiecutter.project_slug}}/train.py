"""Trains the model reproducibly; every run writes a folder that records what it did.

    python -m {{ cookiecutter.project_slug }}.train --seed 42 --out runs/a
    python -m {{ cookiecutter.project_slug }}.train --seed 42 --out runs/b   # the same weights_sha256 as runs/a
    python -m {{ cookiecutter.project_slug }}.train --out runs/a --resume    # after a crash or preemption
    torchrun --standalone --nproc-per-node 2 -m {{ cookiecutter.project_slug }}.train --out runs/ddp
    torchrun --standalone --nproc-per-node 2 -m {{ cookiecutter.project_slug }}.train --out runs/fsdp --parallel fsdp

Read it from the top. main() checks the command line, then sets determinism and threads. train()
seeds, builds the data and the model from task.py and checks the task on a few samples; then
train_epochs(), for each epoch: model.train(), the steps (train_step: forward, loss, backward,
clipping, optimizer.step(), zero_grad, the schedule; a checkpoint when one is due, a stop when one
is asked for), evaluate() in eval mode, a checkpoint at the epoch's end; then model.pt and
summary.json. Nothing here is specific to the example task; the machinery that a reader need not
see (checks, checkpoints, torchrun) is in engine/, the settings any project could copy in utils/.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset
from tqdm import tqdm

from . import task
from .config import Config
from .engine import distributed
from .engine.checkpoint import TrainingState, save_checkpoint, save_sharded_checkpoint
from .engine.contract import TaskError, check_declared_draws, check_task
from .engine.endings import checkpoint_after_failure, failed, stopped
from .engine.environment import describe_environment, environment_changes
from .engine.files import write_json
from .engine.loop import StepRows, accumulation_windows, add_sums, read_back
from .engine.optim import make_optimizer
from .engine.plan import Plan, device_and_folder_problem, plan_run, refuse, refuse_if, say
from .engine.precision import autocast, compile_model, make_scaler
from .engine.run_folder import MetricsLog, clear_run_files, write_result
from .engine.signals import StopSignals
from .engine.tracking import make_trackers
from .engine.world_sizes import describe, write_world_sizes
from .utils.data import make_loader
from .utils.device import to_device
from .utils.repro import configure_determinism, seed_everything, seed_step, set_thread_count


def main(argv: list[str] | None = None) -> int:
    plan = plan_run(argv)  # every check of the input first: a mistake gets one line and exit 2
    if plan is None:
        return 0  # --resume of a finished run: nothing to do
    config = plan.config
    # 1. Determinism before anything touches the GPU: CUDA reads CUBLAS_WORKSPACE_CONFIG once, as it starts.
    configure_determinism(config.deterministic)
    # 2. A fixed thread count: intra-op parallelism splits reductions by thread, so the default
    #    (one thread per core) would make results depend on the machine.
    set_thread_count(config.threads)
    # 3. Mixed precision and compilation depend on the device: checked now that CUDA may start.
    refuse_if(device_and_folder_problem(plan))
    if config.world_size > 1 or config.parallel == "fsdp":
        distributed.join(plan.device)
    try:
        return train(plan)
    except TaskError as error:  # before the run folder holds anything
        refuse(f"the task does not keep its promises: {error}")
    except Exception as error:  # the task's code (data, model) failed before the first step
        return failed(plan, error, step=0, checkpoint=None)
    finally:
        distributed.leave()


def train(plan: Plan) -> int:
    config, device, out = plan.config, plan.device, plan.out
    # 4. Seeds right before the first draws: the model's initial weights, the same on every rank.
    seed_everything(config.seed)
    train_set, val_set = task.make_datasets(config)
    model = task.make_model(config, train_set).to(device)
    check_declared_draws(train_set, val_set)  # one line and exit 2 if a dataset draws from a generator it leaves out
    train_loader, val_loader = make_loaders(first(train_set, config.max_samples),
                                            first(val_set, config.max_samples), config)
    names = check_task(task, model, val_loader, device, config.precision)  # one line and exit 2 if not
    trained = prepare_for_training(model, config, device)  # FSDP shards the model: before the optimizer sees it
    optimizer, scheduler = make_optimizer(model, config, steps=config.epochs * steps_per_epoch(train_loader, config))
    state = TrainingState(model, optimizer, scheduler, make_scaler(config.precision, device))
    if plan.resume_from is not None:
        state.load_checkpoint(plan.resume_from, plan.resume_path)
    log = MetricsLog(out / "metrics.csv", names, rows=state.metrics_rows, writes=distributed.rank() == 0)
    open_run_folder(plan, log, distributed.rank() == 0)
    log.trackers = make_trackers(config, out, distributed.rank() == 0)  # --tensorboard writes into the folder
    started = time.perf_counter()
    with StopSignals() as signals, log:
        ended, figures = train_epochs(plan, state, trained, (train_loader, val_loader), log, signals)
    if ended is not None:
        return ended  # stopped by a signal or --stop-after-steps, or failed
    if figures is None:  # resumed from the checkpoint after the last epoch, whose evaluation was not
        figures = evaluate(model, val_loader, device, config.precision)  # saved; evaluating again changes nothing
    seconds = state.train_seconds + time.perf_counter() - started
    weights = distributed.full_state_dict(model)  # under FSDP every rank sends its shards to rank 0
    if distributed.rank() == 0:
        recorded = replace(config, world_size=plan.started_with)  # as config.json: the world size it started with
        summary = write_result(out, recorded, device, weights, state.step, seconds, figures, task.HEADLINE_METRIC)
        headline = task.HEADLINE_METRIC
        print(f"weights_sha256 {summary['weights_sha256']}  val_{headline} {figures[headline]:.4f}  "
              f"train_seconds {seconds:.1f}  -> {out}")
    return 0


def train_epochs(plan: Plan, state: TrainingState, model: nn.Module, loaders: tuple[DataLoader, DataLoader],
                 log: MetricsLog, signals: StopSignals) -> tuple[int | None, dict | None]:
    """The epochs from `state`'s position on, training `model` (state.model as prepare_for_training
    made it): (the exit status if the run stopped early, else None; the last evaluation's figures)."""
    config, device, (train_loader, val_loader) = plan.config, plan.device, loaders
    rows, per_epoch = StepRows(log, task, device, config.log_every), steps_per_epoch(train_loader, config)
    started, saved_step, figures = time.perf_counter(), state.step, None

    def checkpoint() -> Path | None:
        """Saves the state now (rank 0 writes; under FSDP every rank writes its shards); the rows
        it counts are on disk before it is."""
        nonlocal saved_step
        rows.flush()
        state.metrics_rows, saved_step = log.rows, state.step
        log.sync()
        return save_state(plan, state, state.train_seconds + time.perf_counter() - started)

    try:
        while state.epoch < config.epochs:
            model.train()  # evaluate() left it in the mode it found; a resumed run starts here too
            # The epoch's order is a function of (seed, epoch); a run resumed mid-epoch skips what it trained on.
            train_loader.sampler.set_epoch(state.epoch, start=state.epoch_step * config.batch_size)
            bar = tqdm(total=per_epoch, initial=state.epoch_step, desc=f"epoch {state.epoch + 1}", leave=False,
                       disable=not sys.stderr.isatty())
            for micro_batches in accumulation_windows(train_loader, config.accumulate):  # --accumulate of them a step
                sums = train_step(model, micro_batches, state, config, device)
                rows.add(state.epoch, state.step, sums)  # the step's row of metrics.csv, read back later
                bar.update()
                if distributed.any_rank(signals.signum is not None) or state.step == plan.stop_after_steps:
                    bar.close()  # the message below starts on a fresh line
                    return stopped(plan, signals.signum, state.step, checkpoint()), None
                if config.checkpoint_every and state.step % config.checkpoint_every == 0 \
                        and state.epoch_step < per_epoch:  # the epoch's end has its own, below
                    checkpoint()
            bar.close()
            rows.flush()
            figures = end_epoch(plan, state, val_loader, log, rows.epoch_losses)
            state.epoch, state.epoch_step, rows.epoch_losses = state.epoch + 1, 0, []
            path = checkpoint()
            if state.step == plan.stop_after_steps:  # resumed at that step before the evaluation: now after it
                return stopped(plan, None, state.step, path), None
    except Exception as error:  # the task's code failed: keep what the run has done, then say where
        return failed(plan, error, state.step, checkpoint_after_failure(checkpoint, state.step > saved_step,
                                                                        config)), None
    return None, figures


def train_step(model: nn.Module, micro_batches: list, state: TrainingState, config: Config,
               device: torch.device) -> dict:
    """One optimizer step over `micro_batches` (--accumulate of them; fewer at an epoch's end):
    their gradients add up, then one step. Returns the step's sums (still on the device: the
    metrics rows read them back later, in one transfer every --log-every steps)."""
    optimizer, scheduler, scaler = state.optimizer, state.scheduler, state.scaler
    step_sums = None
    for micro_batch, batch in enumerate(micro_batches):
        inputs, targets = to_device(batch, device)
        # What this micro-batch draws (dropout) is a function of (seed, step, micro-batch, rank):
        # the same after a resume, on any number of processes, whatever the loader did before.
        seed_step(config.seed, state.step + 1, micro_batch, distributed.rank(), device)
        last = micro_batch == len(micro_batches) - 1
        with distributed.no_sync(model, last_micro_batch=last):  # DDP: one gradient all-reduce, after the last
            with autocast(config.precision, device):  # bf16 and fp16 only; fp32 runs as written
                outputs = model(inputs)
                sums = task.batch_sums(outputs, targets)
                loss = task.metrics_from_sums(sums)["loss"]
            # Each micro-batch's share of the step's mean; fp16's scaler multiplies it by the loss
            # scale (fp32 and bf16: it passes the loss through).
            scaler.scale(loss / len(micro_batches)).backward()
        step_sums = add_sums(step_sums, sums)
    if config.clip_grad_norm:
        scaler.unscale_(optimizer)  # clip the true gradients, not fp16's scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad_norm)
    if scaler.is_enabled():
        scaler.step(optimizer)  # fp16: optimizer.step(), unless a gradient overflowed (then the scale shrinks)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    state.step, state.epoch_step = state.step + 1, state.epoch_step + 1
    return step_sums


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device, precision: str = "fp32") -> dict[str, float]:
    """The task's figures over `loader`'s whole split.

    In eval mode (dropout off; BatchNorm uses its running statistics and does not update them),
    without gradients; it draws no random number and restores the mode it found. The task's sums
    are added up over every batch, and under torchrun over every rank, before the task divides:
    a mean over samples or tokens, whatever the batches. Under FSDP every rank makes the same
    number of forward passes (distributed.evaluation_batches).
    """
    was_training = model.training
    model.eval()
    distributed.broadcast_buffers(model)  # every rank scores the model that rank 0 saves
    totals = None
    try:
        with torch.no_grad():
            for batch, counted in distributed.evaluation_batches(loader, lockstep=distributed.is_sharded(model)):
                inputs, targets = to_device(batch, device)
                with autocast(precision, device):
                    sums = task.batch_sums(model(inputs), targets)
                if not counted:  # a forward pass that FSDP's lockstep needs: its sums count nothing
                    sums = {name: torch.zeros_like(torch.as_tensor(value)) for name, value in sums.items()}
                totals = add_sums(totals, sums)
    finally:
        model.train(was_training)
    totals = distributed.sum_over_ranks({name: torch.as_tensor(value, device=device) for name, value in totals.items()})
    figures = task.metrics_from_sums(totals)
    return dict(zip(figures, read_back([figures], tuple(figures), device)[0], strict=True))


def save_state(plan: Plan, state: TrainingState, seconds: float) -> Path | None:
    """A checkpoint of `state`: one file that rank 0 writes, or under FSDP a folder to which every
    rank writes its shards (engine/checkpoint.py)."""
    config = plan.config.to_dict()
    if plan.config.parallel == "fsdp":
        return save_sharded_checkpoint(plan.out / "checkpoints", state, config, seconds)
    if distributed.rank() != 0:
        return None
    return save_checkpoint(plan.out / "checkpoints", state.to_checkpoint(config, seconds))


def end_epoch(plan: Plan, state: TrainingState, val_loader: DataLoader, log: MetricsLog,
              losses: list[float]) -> dict | None:
    """Evaluates if it is due (its row into metrics.csv) and prints the epoch's line; the figures."""
    config = plan.config
    figures = evaluate(state.model, val_loader, plan.device, config.precision) \
        if evaluation_due(state.epoch, config) else None
    if figures is not None:
        log.write(state.epoch, state.step, "val", figures)
    report_epoch(state, config, losses, figures)
    return figures


def steps_per_epoch(train_loader: DataLoader, config: Config) -> int:
    """Optimizer steps in a whole epoch: the loader's micro-batches, --accumulate at a time."""
    return math.ceil(len(train_loader) / config.accumulate)


def evaluation_due(epoch: int, config: Config) -> bool:
    return epoch == config.epochs - 1 or bool(config.eval_every and (epoch + 1) % config.eval_every == 0)


def first(dataset: Dataset, limit: int) -> Dataset:
    """The first `limit` samples of `dataset` (--max-samples; 0: all of them)."""
    return Subset(dataset, range(limit)) if 0 < limit < len(dataset) else dataset


def make_loaders(train_set: Dataset, val_set: Dataset, config: Config) -> tuple[DataLoader, DataLoader]:
    """Loaders whose order and random draws are functions of the seed, whatever the worker count
    (see utils/data.py); under torchrun each rank loads its share of every global batch."""
    loading = {"num_workers": config.num_workers, "persistent_workers": config.persistent_workers,
               "prefetch_factor": config.prefetch_factor, "rank": distributed.rank(), "world_size": config.world_size}
    return (make_loader(train_set, config.micro_batch_size, config.seed, train=True, **loading),
            make_loader(val_set, config.val_batch_size, config.seed, train=False, **loading))


def open_run_folder(plan: Plan, log: MetricsLog, is_main: bool) -> None:
    """A new run writes its config, environment and an empty metrics.csv; a resumed one cuts
    metrics.csv back to what its checkpoint counted, and warns if the environment changed."""
    if not is_main:
        return
    environment = describe_environment(plan.device, plan.config.world_size, distributed.backend())
    if plan.resume_from is None:
        clear_run_files(plan.out)  # --overwrite: the earlier run's files, and only those
        write_json(plan.out / "config.json", plan.config.to_dict())
        write_json(plan.out / "environment.json", environment)
        log.create()
        return
    log.cut_back()
    if plan.settings_added:  # a run recorded before these settings existed: their defaults, recorded now
        write_json(plan.out / "config.json", {**plan.config.to_dict(), "world_size": plan.started_with})
        say(f"note: {plan.out}/config.json did not record {', '.join(plan.settings_added)} (the run is older than "
            "these settings): their defaults are taken and recorded")
    epoch = plan.resume_from["epoch"]  # the epoch it goes on with; past the last one: only the result is left
    where = f"epoch {epoch + 1}" if epoch < plan.config.epochs else "after the last epoch"
    print(f"resuming from {plan.resume_path} ({where}, step {plan.resume_from['step']})", flush=True)
    write_world_sizes(plan.out, list(plan.world_sizes))
    changed = environment_changes(plan.out, environment)
    if plan.world_sizes:  # said here, and recorded in world_sizes.json
        changed = [line for line in changed if not line.startswith("world_size:")]
        say(f"note: the run goes on with {describe(list(plan.world_sizes), plan.started_with)} "
            f"(recorded in {plan.out}/world_sizes.json): the same steps see the same samples, but gradients add up "
            "in another order and each rank draws its own dropout, so it no longer equals a run that never changed")
    if changed:
        say(f"warning: resuming in another environment ({'; '.join(changed)}): the result may differ from a "
            "run that never stopped")


def prepare_for_training(model: nn.Module, config: Config, device: torch.device) -> nn.Module:
    """What the loop trains: under torchrun a DistributedDataParallel copy, or with --parallel
    fsdp the model itself, sharded in place block by block (engine/distributed.py says which
    modules are blocks; task.py may name its own with `fsdp_blocks(model)`); compiled with
    --compile. Evaluation uses `model`: the same tensors (under FSDP, the sharded model itself)."""
    blocks = task.fsdp_blocks(model) if config.parallel == "fsdp" and hasattr(task, "fsdp_blocks") else None
    wrapped = distributed.wrap(model, device, config.parallel, blocks, config.precision)
    return compile_model(wrapped) if config.compile else wrapped


def report_epoch(state: TrainingState, config: Config, losses: list[float], figures: dict | None) -> None:
    if distributed.rank() != 0:
        return
    line = f"epoch {state.epoch + 1}/{config.epochs}  step {state.step}"
    if losses:  # none when the run resumed at the epoch's end, before its evaluation
        line += f"  train_loss {sum(losses) / len(losses):.4f}"
    for name, value in (figures or {}).items():
        line += f"  val_{name} {value:.4f}"
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
