"""Specifications of the training loop's pieces in engine/loop.py: a step whose loss or gradients are not
finite stops the run (finite_step's flag, then StepRows raising NonFiniteStep), and the loader's batches
go to the optimizer steps `accumulate` at a time, each exactly once, in order."""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

import pytest
import torch
from repro_core.engine.loop import NonFiniteStep, StepRows, accumulation_windows, add_sums, finite_step, read_back
from repro_core.engine.run_folder import MetricsLog
from repro_core.engine.runs import read_metrics
from torch import nn

CPU = torch.device("cpu")


def gradients_with(value: float | None, where: int = 2) -> list[torch.Tensor] | None:
    """Three finite gradients of several shapes, with `value` put into one element of gradient `where`
    (None: no gradients at all)."""
    if value is None:
        return None
    gradients = [torch.full((2, 3), 0.25), torch.linspace(-1.0, 1.0, 5), torch.ones(4, 1)]
    gradients[where].view(-1)[1] = value
    return gradients


@pytest.mark.parametrize("loss", [1.5, math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("gradient", [None, 0.5, math.inf, -math.inf, math.nan])
def test_a_step_is_finite_only_when_its_loss_and_every_gradient_are(loss: float, gradient: float | None) -> None:
    """A finite loss with one gradient holding inf or NaN is not a finite step, and neither is a NaN or
    infinite loss with finite gradients; None (fp16: GradScaler skips an overflow itself) checks the loss."""
    expected = math.isfinite(loss) and (gradient is None or math.isfinite(gradient))
    assert bool(finite_step(torch.tensor(loss), gradients_with(gradient))) is expected


@pytest.mark.parametrize("where", [0, 1, 2])
@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_non_finite_value_in_any_one_gradient_with_a_finite_loss_stops_the_step(where: int, bad: float) -> None:
    assert not bool(finite_step(torch.tensor(0.75), gradients_with(bad, where)))


@pytest.mark.parametrize("loss", [0.5, math.nan])
def test_a_step_that_reached_no_gradient_is_judged_by_its_loss(loss: float) -> None:
    """No trainable parameter reached (a frozen model's step, an empty list of gradients): nothing to
    check but the loss, as with None, and no error from a reduction over nothing."""
    assert bool(finite_step(torch.tensor(loss), [])) is math.isfinite(loss)


def test_the_finite_flag_stays_a_tensor_on_the_device_so_the_host_never_waits_for_it() -> None:
    flag = finite_step(torch.tensor(2.0, requires_grad=True) * 3, gradients_with(0.5))
    assert isinstance(flag, torch.Tensor) and flag.dtype == torch.bool and flag.shape == ()
    assert flag.device == CPU and not flag.requires_grad


def test_gradients_of_another_dtype_and_empty_shards_are_checked_too() -> None:
    """Under FSDP a rank's shard of a small parameter may be empty; under bf16 a gradient may be bfloat16."""
    assert bool(finite_step(torch.tensor(1.0), [torch.empty(0), torch.ones(3, dtype=torch.bfloat16)]))
    infinite = torch.tensor([1.0, math.inf], dtype=torch.bfloat16)
    assert not bool(finite_step(torch.tensor(1.0), [torch.empty(0), infinite]))


class SumOfSquares:
    """A task's metrics from its sums, as StepRows asks of one: the loss, the mean of the squared errors."""

    @staticmethod
    def metrics_from_sums(sums: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"loss": sums["squared_error"] / sums["samples"]}


def metrics_log(folder: Path) -> MetricsLog:
    log = MetricsLog(folder / "metrics.csv", ("loss",), rows=0, writes=True)
    log.create()
    return log


def written_steps(log: MetricsLog) -> list[tuple[int, float]]:
    with open(log.path, newline="", encoding="utf-8") as file:
        return [(int(row["step"]), float(row["loss"])) for row in csv.DictReader(file)]


def step_sums(loss: float) -> dict[str, torch.Tensor | int]:
    return {"squared_error": torch.tensor(4 * loss), "samples": 4}


def test_a_step_flagged_not_finite_stops_the_run_at_the_flush_after_writing_every_pending_row(tmp_path: Path) -> None:
    """The flag comes from finite_step: a finite loss whose gradient holds inf. Every row is written (the
    loss is seen going wrong), then NonFiniteStep names the first bad step, not a later one."""
    log = metrics_log(tmp_path)
    with log:
        rows = StepRows(log, SumOfSquares, CPU, every=10)
        for step, (loss, gradient) in enumerate([(1.0, 0.5), (2.0, math.inf), (3.0, math.nan), (4.0, 0.5)], 1):
            rows.add(0, step, step_sums(loss), finite_step(torch.tensor(loss), gradients_with(gradient)), lr=0.1)
        assert log.rows == 0  # kept on the device until the flush
        with pytest.raises(NonFiniteStep) as stop:
            rows.flush()
    assert stop.value.step == 2 and stop.value.epoch == 0 and stop.value.figures == {"loss": 2.0}
    assert written_steps(log) == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)] and log.rows == 4


def test_a_nan_loss_stops_the_run_at_the_flush_that_every_steps_makes_by_itself(tmp_path: Path) -> None:
    log = metrics_log(tmp_path)
    with log:
        rows = StepRows(log, SumOfSquares, CPU, every=2)
        rows.add(1, 7, step_sums(1.0), finite_step(torch.tensor(1.0), gradients_with(0.5)))
        with pytest.raises(NonFiniteStep) as stop:
            rows.add(1, 8, step_sums(math.nan), finite_step(torch.tensor(math.nan), gradients_with(0.5)))
    assert (stop.value.epoch, stop.value.step) == (1, 8) and math.isnan(stop.value.figures["loss"])
    assert [step for step, _ in written_steps(log)] == [7, 8]


def test_an_epochs_training_losses_are_the_steps_losses_in_order_not_their_finite_flags(tmp_path: Path) -> None:
    """epoch_losses feed the epoch's mean loss that a run prints: the losses, computed here from the
    sums (squared error / samples), not the flag that rides beside them (1.0 or 0.0)."""
    log = metrics_log(tmp_path)
    with log:
        rows = StepRows(log, SumOfSquares, CPU, every=2)
        for step, loss in enumerate([0.5, 0.25, 3.0], 1):
            rows.add(0, step, step_sums(loss), finite_step(torch.tensor(loss), gradients_with(0.5)), lr=0.1)
        rows.flush()
    assert rows.epoch_losses == [0.5, 0.25, 3.0]


def test_steps_that_are_all_finite_write_their_rows_and_raise_nothing(tmp_path: Path) -> None:
    log = metrics_log(tmp_path)
    with log:
        rows = StepRows(log, SumOfSquares, CPU, every=3)
        for step in range(1, 8):
            rows.add(0, step, step_sums(float(step)), finite_step(torch.tensor(float(step)), gradients_with(0.5)))
        assert log.rows == 6  # two flushes of three rows; the seventh waits for the next
        rows.flush()
    assert written_steps(log) == [(step, float(step)) for step in range(1, 8)]


def test_each_training_row_holds_the_learning_rate_its_step_took_and_reads_back_as_a_run(tmp_path: Path) -> None:
    """metrics.csv's lr column is the schedule the run took, which plot, compare and verify read:
    each step's row holds the learning rate handed to add() with its sums, as that exact float,
    whichever flush wrote it; and the file reads back as a run's (a training row needs its lr)."""
    rates = [0.0, 0.1, 1e-3 / 3, 0.05, 2.5e-4]  # a warm-up's first zero, and a float no short decimal writes
    log = metrics_log(tmp_path)
    with log:
        rows = StepRows(log, SumOfSquares, CPU, every=2)
        for step, lr in enumerate(rates, 1):
            rows.add(0, step, step_sums(1.0), finite_step(torch.tensor(1.0), gradients_with(0.5)), lr=lr)
        rows.flush()
    written, names = read_metrics(log.path)
    assert [(int(row["step"]), row["split"], float(row["lr"])) for row in written] == \
        [(step, "train", lr) for step, lr in enumerate(rates, 1)] and names == ("loss",)


@pytest.mark.parametrize("items, accumulate", [(12, 3), (10, 3), (11, 4), (2, 5), (5, 5), (7, 1), (0, 4), (1, 2)])
def test_accumulation_windows_hold_accumulate_batches_each_the_last_fewer_every_batch_once_in_order(
        items: int, accumulate: int) -> None:
    batches = [("batch", i) for i in range(items)]
    expected = [batches[start:start + accumulate] for start in range(0, items, accumulate)]
    windows = list(accumulation_windows(iter(batches), accumulate))  # a loader is read once, as an iterator
    assert windows == expected
    assert [batch for window in windows for batch in window] == batches  # each once, in order
    assert all(a is b for a, b in zip((batch for window in windows for batch in window), batches, strict=True))


def test_accumulation_windows_hand_out_each_window_as_soon_as_it_is_full() -> None:
    """A step starts when its micro-batches are there, not when the loader is exhausted."""
    windows = accumulation_windows(itertools.count(), 3)
    assert next(windows) == [0, 1, 2] and next(windows) == [3, 4, 5]


class OwnLayerNorm(nn.Module):
    """nanoGPT's norm: a class of its own, so no list of torch's norm classes names it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(x, self.weight.shape, self.weight)


def test_weight_decay_on_weights_exempts_a_tasks_own_norm_by_its_one_dimension_and_decays_every_matrix() -> None:
    from repro_core.engine.optim import parameter_groups

    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4), OwnLayerNorm(4), nn.LayerNorm(4), nn.Linear(4, 3))
    decayed, exempt = parameter_groups(model, 0.1, "weights")
    assert [id(p) for p in decayed["params"]] == [id(model[1].weight), id(model[4].weight)]
    assert {id(p) for p in exempt["params"]} == {id(model[0].weight), id(model[1].bias), id(model[2].weight),
                                                 id(model[3].weight), id(model[3].bias), id(model[4].bias)}
    assert (decayed["weight_decay"], exempt["weight_decay"]) == (0.1, 0.0)


def test_figures_are_read_back_as_the_exact_floats_the_task_computed() -> None:
    """float64 holds every float32 and every figure a task computes in float64 (a Python number, a
    count): nothing read back is rounded. The oracle: the values themselves, compared as floats."""
    third, big = 1 / 3, 2.0**24 + 1  # neither is a float32
    figures = [{"loss": torch.tensor(0.1, dtype=torch.float64), "accuracy": third, "samples": 16777217},
               {"loss": torch.tensor(0.1, dtype=torch.float32), "accuracy": torch.tensor(big, dtype=torch.float64),
                "samples": 3}]
    rows = read_back(figures, ("loss", "accuracy", "samples"), CPU)
    assert rows == [[0.1, third, big], [float(torch.tensor(0.1, dtype=torch.float32)), big, 3.0]]
    assert all(type(value) is float for row in rows for value in row)


def test_a_figure_of_one_element_in_any_shape_is_read_back_as_its_one_number() -> None:
    """The contract takes any figure that holds one number (numel 1): an accuracy of shape (1,) or
    (1, 1) beside a loss of shape () is read back, each as its float, as the scalars would be."""
    figures = [{"loss": torch.tensor(1.5), "accuracy": torch.tensor([0.25]), "samples": torch.tensor([[16.0]])},
               {"loss": torch.tensor([2.5]), "accuracy": 0.5, "samples": 8}]
    assert read_back(figures, ("loss", "accuracy", "samples"), CPU) == [[1.5, 0.25, 16.0], [2.5, 0.5, 8.0]]


def test_a_steps_sums_add_up_micro_batch_by_micro_batch_and_hold_no_autograd_graph() -> None:
    """What a step keeps for its metrics row (StepRows holds it for --log-every steps) is numbers:
    the micro-batches' sums added name by name, none holding the graph of the activations that made
    it, which would keep them in memory; the task's own sums keep theirs, which backward needs."""
    weight = torch.tensor(2.0, requires_grad=True)
    first, second = {"loss": weight * 3, "count": 2}, {"loss": weight * 5, "count": 1}
    total = add_sums(add_sums(None, first), second)
    assert total == {"loss": 16.0, "count": 3}
    assert not total["loss"].requires_grad and total["loss"].grad_fn is None
    assert first["loss"].grad_fn is not None and second["loss"].grad_fn is not None
