"""The training loop and evaluation, for any task: what a batch's sums and figures are is task.py's.

- `training_steps` trains to the end of an epoch and yields after every optimizer step, so that
  train.py says in plain sight what happens between steps (checkpoint when due, stop when asked).
  A step adds up the gradients of --accumulate micro-batches; --clip-grad-norm clips their total
  norm, after fp16's GradScaler has unscaled them.
- `StepRows` keeps each step's sums on the device and reads them back in one transfer every
  --log-every steps: the host never waits for the device in between (nanoGPT and torchtitan read
  the loss back rarely for this reason), and still every step gets its row, bit for bit.
- `evaluate` adds the task's sums up over the whole split, and over every process under torchrun,
  before the task turns them into figures: a mean over samples or tokens, whatever the batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import torch
from torch import nn
from torch.utils.data import DataLoader

from . import distributed
from .checkpoint import TrainingState
from .device import to_device
from .precision import autocast
from .repro import Stream, derive_seed, keyed_seed, seed_global_generators
from .run_folder import MetricsLog

Sums = dict[str, torch.Tensor | int | float]


def training_steps(model: nn.Module, loader: DataLoader, state: TrainingState, config, task: ModuleType,
                   device: torch.device) -> Iterator[Sums]:
    """Trains from `state`'s position to the end of its epoch, yielding each step's sums (still on
    the device) after the step. `model` is what trains (wrapped for torchrun or compiled)."""
    model.train()
    loader.sampler.set_epoch(state.epoch, start=state.epoch_step * config.batch_size)
    batches, left = iter(loader), len(loader)
    step_seeds = derive_seed(config.seed, Stream.STEP, distributed.rank())
    while left:
        window, step_sums = min(config.accumulate, left), None
        for micro_batch in range(window):
            inputs, targets = to_device(next(batches), device)
            # What this micro-batch draws (dropout) is a function of (seed, step, micro-batch, rank):
            # the same after a resume, on any number of processes, whatever the loader did before.
            seed_global_generators(keyed_seed(step_seeds, state.step + 1, micro_batch), device)
            with distributed.no_sync(model, last_micro_batch=micro_batch == window - 1):
                with autocast(config.precision, device):
                    sums = task.batch_sums(model(inputs), targets)
                    loss = task.metrics_from_sums(sums)["loss"]
                state.scaler.scale(loss / window).backward()  # fp32 and bf16: the scaler passes it through
            step_sums = add_sums(step_sums, sums)
        if config.clip_grad_norm:
            state.scaler.unscale_(state.optimizer)  # clip the true gradients, not fp16's scaled ones
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad_norm)
        state.scaler.step(state.optimizer)
        state.scaler.update()
        state.optimizer.zero_grad(set_to_none=True)
        state.scheduler.step()
        state.step, state.epoch_step, left = state.step + 1, state.epoch_step + 1, left - window
        yield step_sums


def evaluate(model: nn.Module, loader: DataLoader, task: ModuleType, device: torch.device,
             precision: str = "fp32") -> dict[str, float]:
    """The task's figures over `loader`'s whole split.

    Runs in eval mode (dropout off, BatchNorm uses its running statistics and does not update
    them) without gradients, draws no random number, and restores the mode it found. Under
    torchrun, rank 0's buffers are first copied to every rank, and under FSDP every rank makes
    the same number of forward passes (see distributed.evaluation_batches).
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
    # Under torchrun each rank saw its own share: add them up, then divide.
    totals = distributed.sum_over_ranks({name: torch.as_tensor(value, device=device) for name, value in totals.items()})
    figures = task.metrics_from_sums(totals)
    return dict(zip(figures, read_back([figures], tuple(figures), device)[0], strict=True))


class StepRows:
    """Each training step's sums, kept on the device until flush() writes their rows to metrics.csv
    in one transfer: every `every` steps, and whenever the caller flushes (a checkpoint, the end
    of an epoch, a stop)."""

    def __init__(self, log: MetricsLog, task: ModuleType, device: torch.device, every: int) -> None:
        self.log, self.task, self.device, self.every = log, task, device, every
        self.pending: list[tuple[int, int, Sums]] = []
        self.epoch_losses: list[float] = []  # the training losses written for the epoch in progress

    def add(self, epoch: int, step: int, sums: Sums) -> None:
        self.pending.append((epoch, step, sums))
        if len(self.pending) >= self.every:
            self.flush()

    def flush(self) -> None:
        """Writes every pending row. Under torchrun all ranks flush at the same steps (the sums are
        added up over ranks first)."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        stacked = {name: stack([sums[name] for _, _, sums in pending], self.device) for name in pending[0][2]}
        distributed.sum_over_ranks(stacked)
        figures = [self.task.metrics_from_sums({name: value[i] for name, value in stacked.items()})
                   for i in range(len(pending))]
        for (epoch, step, _), values in zip(pending, read_back(figures, self.log.names, self.device), strict=True):
            self.log.write(epoch, step, "train", dict(zip(self.log.names, values, strict=True)))
            self.epoch_losses.append(values[0])


def add_sums(total: Sums | None, sums: Sums) -> Sums:
    """total + sums, name by name, detached from the autograd graph."""
    sums = {name: value.detach() if isinstance(value, torch.Tensor) else value for name, value in sums.items()}
    return sums if total is None else {name: total[name] + value for name, value in sums.items()}


def stack(values: list, device: torch.device) -> torch.Tensor:
    """One tensor on `device` of the same sum at several steps (tensors, or plain numbers)."""
    if all(isinstance(value, torch.Tensor) for value in values):
        return torch.stack(values)
    return torch.tensor(values, device=device)


def read_back(figures: list[dict], names: tuple[str, ...], device: torch.device) -> list[list[float]]:
    """The figures as Python floats, in one transfer from the device (float64 holds every float32
    exactly, so nothing is rounded)."""
    table = torch.stack([torch.stack([torch.as_tensor(row[name], dtype=torch.float64, device=device).reshape(())
                                      for name in names]) for row in figures])
    return table.tolist()
