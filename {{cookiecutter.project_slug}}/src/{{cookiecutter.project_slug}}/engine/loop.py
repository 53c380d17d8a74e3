"""What train.py's loop needs and a reader need not see: the micro-batches of each step, and the
steps' metrics rows, kept on the device.

- `accumulation_windows` hands train.py the loader's batches --accumulate at a time: one list per
  optimizer step (fewer at an epoch's end).
- `seed_micro_step` seeds what each micro-batch draws (dropout) from (seed, step, micro-batch, rank).
- `StepRows` keeps each step's sums on the device and reads them back in one transfer every
  --log-every steps: the host never waits for the device in between (nanoGPT and torchtitan read
  the loss back rarely for this reason), and still every step gets its row, bit for bit. With the
  rows comes each step's flag of a finite loss and gradients: a step that had none raises
  NonFiniteStep there, before any checkpoint is written (a checkpoint flushes the rows first).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import ModuleType

import torch

from ..utils.repro import Stream, derive_seed, keyed_seed, seed_global_generators
from . import distributed
from .run_folder import MetricsLog

Sums = dict[str, torch.Tensor | int | float]


def accumulation_windows(loader: Iterable, accumulate: int) -> Iterator[list]:
    """The loader's batches, `accumulate` at a time: each list is one optimizer step's micro-batches
    (the epoch's last may hold fewer)."""
    window = []
    for batch in loader:
        window.append(batch)
        if len(window) == accumulate:
            yield window
            window = []
    if window:
        yield window


def seed_micro_step(seed: int, step: int, micro_batch: int, rank: int, device: torch.device | None = None) -> None:
    """utils/repro.py's seed_step, keyed by the micro-batch and the process too: what a micro-batch
    draws (dropout's masks) is a function of (seed, step, micro-batch, rank) alone, the same after a
    resume, with any number of loader workers, whatever ran before; no two micro-batches of a step
    draw alike, and each process under torchrun draws masks of its own for its own samples. At
    micro-batch 0 and rank 0 it draws what seed_step draws: one process trains alike in both sizes."""
    seed_global_generators(keyed_seed(derive_seed(seed, Stream.STEP, rank), step, micro_batch), device)


class NonFiniteStep(Exception):
    """A step's loss or gradients were not finite (--nonfinite stop), or the validation loss after
    it (`split` "val": a step's loss is taken before its update, and that update broke the model):
    where, and on which samples."""

    def __init__(self, epoch: int, step: int, figures: dict[str, float], split: str = "train") -> None:
        what = "the loss or a gradient" if split == "train" else "the validation loss"
        super().__init__(f"{what} is not finite at step {step}")
        self.epoch, self.step, self.figures, self.split = epoch, step, figures, split
        self.samples: list[int] | None = None  # the indices of the step's samples, where train.py knows them


class StepRows:
    """Each training step's sums, kept on the device until flush() writes their rows to metrics.csv
    in one transfer: every `every` steps, and whenever the caller flushes (a checkpoint, the end
    of an epoch, a stop)."""

    def __init__(self, log: MetricsLog, task: ModuleType, device: torch.device, every: int,
                 over_ranks: bool = True) -> None:
        self.log, self.task, self.device, self.every = log, task, device, every
        self.over_ranks = over_ranks  # False: each step's sums are already over every rank (--invariant-shards)
        self.pending: list[tuple[int, int, Sums, torch.Tensor | bool, float]] = []
        self.epoch_losses: list[float] = []  # the training losses written for the epoch in progress

    def add(self, epoch: int, step: int, sums: Sums, finite: torch.Tensor | bool = True, lr: float = 0.0) -> None:
        """A step's row: its sums, `finite` (a flag still on the device) false if the step is to
        stop the run, and the learning rate it took."""
        self.pending.append((epoch, step, sums, finite, lr))
        if len(self.pending) >= self.every:
            self.flush()

    def flush(self) -> None:
        """Writes every pending row, then raises NonFiniteStep for the first step whose flag is
        false. Under torchrun all ranks flush at the same steps (sums and flags are added up over
        ranks first)."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        stacked = {name: stack([sums[name] for _, _, sums, *_ in pending], self.device) for name in pending[0][2]}
        stacked["~unfinite"] = (~stack([finite for *_, finite, _ in pending], self.device).bool()).to(torch.int64)
        if self.over_ranks:
            distributed.sum_over_ranks(stacked)
        figures = [{**self.task.metrics_from_sums({name: value[i] for name, value in stacked.items()
                                                   if name != "~unfinite"}), "~unfinite": stacked["~unfinite"][i]}
                   for i in range(len(pending))]
        names, bad = (*self.log.names, "~unfinite"), None
        for (epoch, step, *_, lr), values in zip(pending, read_back(figures, names, self.device), strict=True):
            row = dict(zip(self.log.names, values[:-1], strict=True))
            self.log.write(epoch, step, "train", row, lr)
            self.epoch_losses.append(values[0])
            if values[-1] and bad is None:  # any rank's
                bad = NonFiniteStep(epoch, step, row)
        if bad is not None:
            raise bad


def finite_step(loss: torch.Tensor, gradients: list[torch.Tensor] | None) -> torch.Tensor:
    """On the device, whether a step's loss (summed over its micro-batches) and its gradients
    (None: not checked, as under fp16, whose GradScaler skips an overflow itself) are all finite:
    no wait for the device, one reduction over the gradients."""
    finite = torch.isfinite(loss.detach()).all()
    if gradients:
        finite = finite & torch.isfinite(torch.stack([torch.linalg.vector_norm(g) for g in gradients]).sum())
    return finite


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
