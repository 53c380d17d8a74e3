"""engine/contract.py in this process, on a task and datasets of the test's own: a task that keeps its
promises gives its figure names, loss first; each promise broken is refused in its one line, word for
word; the draws check finds a generator a dataset leaves out, or keeps of its own, and leaves the
global generators as it found them; two samples are the same only bit for bit. A bake's
tests/test_task_contract.py refuses broken tasks through its `train`, on the user's own task.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from repro_core.engine import contract
from repro_core.engine.contract import CHECKED_SAMPLES, TaskError, check_declared_draws, check_task, same
from repro_core.utils.data import make_loader
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def test_two_samples_are_the_same_only_when_every_part_is_equal_bit_for_bit():
    """The draws check calls a declaration honest when a generator it leaves out changes no sample:
    its comparison must see every kind of difference a sample can hold."""
    t, a = torch.tensor([1.0, 2.0]), np.array([1.0, 2.0])
    sample = {"image": t, "array": a, "parts": [1, (2.5, "x")], "label": 3}
    assert same(sample, {"image": t.clone(), "array": a.copy(), "parts": [1, (2.5, "x")], "label": 3})
    assert same(object(), object())  # no equality of its own: the check cannot see in
    # A NaN in a sample (a missing label) is the same as itself, as a Python, a NumPy or a torch number
    nans = [math.nan, np.float64("nan"), np.float32("nan"), torch.tensor(math.nan), np.array([math.nan])]
    assert same(nans, [math.nan, np.float64("nan"), np.float32("nan"), torch.tensor(math.nan), np.array([math.nan])])
    differs = [
        (0.0, -0.0), (np.float32(0.0), np.float32(-0.0)), (1.5, np.float64(1.5)), (np.float32(1.5), np.float64(1.5)),
        (1, 1.0), (math.nan, np.float64("nan")),
        (t, torch.tensor([1.0, 2.5])), (t, t.double()), (t, t.reshape(2, 1)), (t, a),
        (torch.tensor([0.0]), torch.tensor([-0.0])),  # equal as numbers, not bit for bit
        (a, np.array([1.0, 2.5])), (a, a.astype(np.float32)), (a, a.reshape(2, 1)), (a, t),
        ([1, 2], [1, 3]), ([1, 2], [1, 2, 3]), ([1, 2], (1, 2)), ((1, [t]), (1, [t + 1])),
        ({"x": 1}, {"x": 2}), ({"x": 1}, {"y": 1}), ({"x": 1}, [1]), ({"x": t}, {"x": t + 1}),
        (3, 4), ("x", "y"),
    ]
    for left, right in differs:
        assert not same(left, right) and not same(right, left), (left, right)


# ---- check_task and its parts, on a task of the test's own (a regression) ---------------------------


def regression_task(**changes) -> SimpleNamespace:
    """A task module's functions: a squared error summed over a batch, and its mean."""
    def batch_sums(outputs, targets):
        return {"squares": ((outputs - targets) ** 2).sum(), "count": len(targets)}

    def metrics_from_sums(sums):
        return {"loss": sums["squares"] / sums["count"]}

    return SimpleNamespace(**{"batch_sums": batch_sums, "metrics_from_sums": metrics_from_sums,
                              "HEADLINE_METRIC": "loss", **changes})


def validation_loader(samples: int = 6, target_shape: tuple[int, ...] = (1,)):
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(samples, 2, generator=generator), torch.randn(samples, *target_shape,
                                                                              generator=generator)
    return make_loader(TensorDataset(inputs, targets), batch_size=3, seed=0, train=False)


class Failing(nn.Linear):
    def forward(self, inputs):
        raise ValueError("mat1 and mat2 shapes cannot be multiplied\n(a second line)")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_task_that_keeps_its_promises_gives_its_figure_names_loss_first(precision):
    task_ = regression_task(metrics_from_sums=lambda sums: {"rmse": (sums["squares"] / sums["count"]).sqrt(),
                                                           "loss": sums["squares"] / sums["count"]},
                            HEADLINE_METRIC="rmse")
    assert check_task(task_, nn.Linear(2, 1), validation_loader(), torch.device("cpu"), precision) == ("loss", "rmse")


def test_the_check_runs_the_model_in_evaluation_mode_on_the_first_samples_and_gives_its_mode_back():
    seen = []

    class Recording(nn.Linear):
        def forward(self, inputs):
            seen.append((self.training, len(inputs)))
            return super().forward(inputs)

    model = Recording(2, 1)
    check_task(regression_task(), model, validation_loader(samples=9), torch.device("cpu"), "fp32")
    assert seen == [(False, CHECKED_SAMPLES)] and model.training
    model.eval()
    check_task(regression_task(), model, validation_loader(samples=2), torch.device("cpu"), "fp32")
    assert seen[-1] == (False, 2) and not model.training


def test_the_check_puts_the_samples_on_the_runs_device_and_computes_in_the_runs_precision(monkeypatch):
    """Stand-ins record what the check hands the device and precision helpers (this machine may have no GPU)."""
    asked = []
    monkeypatch.setattr(contract, "to_device", lambda batch, device: asked.append(("to", device)) or batch)
    real_autocast = contract.autocast
    monkeypatch.setattr(contract, "autocast", lambda precision, device: asked.append((precision, device))
                        or real_autocast(precision, device))
    cpu = torch.device("cpu")
    check_task(regression_task(), nn.Linear(2, 1), validation_loader(), cpu, "bf16")
    assert asked == [("to", cpu), ("bf16", cpu)]


@pytest.mark.parametrize("task_, model, loader, line", [
    (regression_task(), nn.Linear(2, 1), validation_loader(samples=0),
     "task.make_datasets returned an empty validation set"),
    (regression_task(), Failing(2, 1), validation_loader(),
     "the model's forward (task.make_model) raised ValueError on the first validation samples: mat1 and mat2 "
     "shapes cannot be multiplied"),
    (regression_task(batch_sums=lambda outputs, targets: {"squares": outputs.sum()}), nn.Linear(2, 1),
     validation_loader(), "task.metrics_from_sums raised KeyError on the first validation samples: 'count'"),
    (regression_task(batch_sums=lambda outputs, targets: {}[0]), nn.Linear(2, 1), validation_loader(),
     "task.batch_sums raised KeyError on the first validation samples: 0"),
    (regression_task(batch_sums=lambda outputs, targets: {"squares": torch.nn.functional.mse_loss(
        outputs, targets, reduction="sum"), "count": 1}), nn.Linear(2, 1), validation_loader(target_shape=()),
     "task.batch_sums: the model's outputs do not fit the targets: Using a target size (torch.Size([4])) that is "
     "different to the input size (torch.Size([4, 1])). This will likely lead to incorrect results due to "
     "broadcasting. Please ensure they have the same size."),
    (regression_task(HEADLINE_METRIC="accuracy", metrics_from_sums=lambda sums: {
        "loss": sums["squares"] / sums["count"], "rmse": (sums["squares"] / sums["count"]).sqrt()}),
     nn.Linear(2, 1), validation_loader(),
     "task.HEADLINE_METRIC is 'accuracy', which is not one of the figures that task.metrics_from_sums returns "
     "(loss, rmse)"),
    (SimpleNamespace(**{name: value for name, value in vars(regression_task()).items() if name != "HEADLINE_METRIC"}),
     nn.Linear(2, 1), validation_loader(),
     "task.HEADLINE_METRIC is None, which is not one of the figures that task.metrics_from_sums returns (loss)"),
], ids=["empty validation set", "forward raises", "metrics raise", "sums raise", "broadcast", "headline",
        "no headline"])
def test_a_task_that_breaks_a_promise_is_refused_with_its_one_line(task_, model, loader, line):
    with pytest.raises(TaskError) as refused:
        check_task(task_, model, loader, torch.device("cpu"), "fp32")
    assert str(refused.value) == line


def test_an_error_in_the_tasks_code_is_told_by_its_first_line_up_to_300_characters():
    def raising(message):
        raise RuntimeError(message)

    for message, told in [("x" * 400, "x" * 300), ("\n  first\nsecond", "first"), ("", "")]:
        with pytest.raises(TaskError) as refused:
            contract.call("task.batch_sums", raising, message)
        assert str(refused.value) == f"task.batch_sums raised RuntimeError on the first validation samples: {told}"


@pytest.mark.parametrize("sums, line", [
    ({}, "task.batch_sums returned dict, not a dict of sums by name"),
    (torch.tensor(1.0), "task.batch_sums returned Tensor, not a dict of sums by name"),
    ({3: 1.0}, "task.batch_sums returned 3: float; each sum must be a tensor or a number, under a name"),
    ({"count": "4"}, "task.batch_sums returned 'count': str; each sum must be a tensor or a number, under a name")])
def test_sums_that_are_not_numbers_by_name_are_refused_with_one_line(sums, line):
    with pytest.raises(TaskError) as refused:
        contract.check_sums(sums)
    assert str(refused.value) == line


LOSS = torch.tensor(0.5, requires_grad=True)
COLUMNS = ("a name must be letters, digits and _, and not one of metrics.csv's own columns or the trackers' name for "
           "lr (epoch, step, split, lr, learning_rate)")


@pytest.mark.parametrize("figures, line", [
    ([LOSS], "task.metrics_from_sums returned list [tensor(0.5000, requires_grad=True)]; it must return a dict "
             "with 'loss' (what training minimises) and any other figures"),
    ({"accuracy": 1.0}, "task.metrics_from_sums returned dict {'accuracy': 1.0}; it must return a dict with 'loss' "
                        "(what training minimises) and any other figures"),
    ({"loss": LOSS, "top 5": 1.0}, f"task.metrics_from_sums returned a figure named 'top 5': {COLUMNS}"),
    ({"loss": LOSS, "lr": 1.0}, f"task.metrics_from_sums returned a figure named 'lr': {COLUMNS}"),
    # A tracker's row holds lr as learning_rate: a figure of that name would be overwritten there.
    ({"loss": LOSS, "learning_rate": 1.0},
     f"task.metrics_from_sums returned a figure named 'learning_rate': {COLUMNS}"),
    ({"loss": LOSS, 5: 1.0}, f"task.metrics_from_sums returned a figure named 5: {COLUMNS}"),
    ({"loss": LOSS, "f1": "high"}, "task.metrics_from_sums returned f1 = str high: each figure must be one number "
                                   "(sum or average it over the batch)"),
    ({"loss": LOSS, "f1": torch.ones(2, 3)}, "task.metrics_from_sums returned f1 = a tensor of shape (2, 3): each "
                                             "figure must be one number (sum or average it over the batch)"),
    ({"loss": LOSS, "f1": torch.tensor(math.inf)}, "task.metrics_from_sums returned f1 = inf on the first validation "
                                                   "samples: a figure must be a finite number (a count of zero?)"),
    ({"loss": torch.tensor(0.5)}, "task.metrics_from_sums returned a 'loss' that does not depend on the model's "
                                  "parameters: compute it from the outputs with torch operations (no .item(), "
                                  "no NumPy)"),
])
def test_figures_that_break_a_promise_are_refused_with_their_one_line(figures, line):
    with pytest.raises(TaskError) as refused:
        contract.check_figures(figures, model_learns=True)
    assert str(refused.value) == line


def test_the_figures_are_named_loss_first_and_a_model_that_learns_nothing_may_return_a_plain_loss():
    figures = {"f1": 0.5, "loss": LOSS, "top_5": torch.tensor(1.0)}
    assert contract.check_figures(figures, model_learns=True) == ("loss", "f1", "top_5")
    assert contract.check_figures({"loss": 0.5}, model_learns=False) == ("loss",)  # a model with no parameters
    assert contract.shown("x" * 100) == "str " + "x" * 60 and contract.shown(torch.zeros(3, 1)) == (
        "a tensor of shape (3, 1)")


# ---- the draws check, on datasets of the test's own ---------------------------------------------------

DRAW = {"random": lambda: random.random(), "numpy": lambda: float(np.random.rand()),
        "torch": lambda: float(torch.rand(()))}


class Drawing(Dataset):
    """Eight samples, each (a fixed tensor plus a draw from one generator, i): "own" draws from a
    generator the dataset keeps, made in __init__; None draws nothing. Declares `draws_from` if given."""

    def __init__(self, generator: str | None, draws_from=None) -> None:
        self.generator, self.own = generator, random.Random(0)
        if draws_from is not None:
            self.draws_from = draws_from

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        shift = {None: lambda: 0.0, "own": self.own.random, **DRAW}[self.generator]()
        return torch.full((2,), float(index)) + shift, index


def global_states():
    return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist()


@pytest.mark.parametrize("generator, declared", [(None, ()), ("numpy", ("numpy",)), ("torch", ("torch", "random")),
                                                 ("random", None)])
def test_an_honest_declaration_passes_and_the_generators_are_left_as_found(generator, declared):
    """The check seeds and fetches samples before the model's weights are drawn: it must shift no draw."""
    torch.manual_seed(5)
    before = global_states()
    check_declared_draws(Drawing(generator, declared), Drawing(None, ()))
    assert global_states() == before


OWN_GENERATOR = ("samples differ from one read to the next with the global generators seeded alike: it draws from a "
                 "generator of its own (one made in __init__ or at import, such as np.random.default_rng() or "
                 "random.Random()), whose state depends on the worker and on what it read before, and which no "
                 "draws_from can fix: make it per sample, and take its seed from torch.randint(2**62, ()) inside "
                 "__getitem__ (the README's rules of a dataset)")


@pytest.mark.parametrize("split", ["training", "validation"])
def test_each_refusal_of_the_draws_check_names_the_set_and_says_what_to_do_word_for_word(split):
    def refusal(dataset) -> str:
        torch.manual_seed(5)
        before = global_states()
        with pytest.raises(TaskError) as refused:
            check_declared_draws(*((dataset, Drawing(None)) if split == "training" else (Drawing(None), dataset)))
        assert global_states() == before  # a refusal too leaves them as found
        return str(refused.value)

    own = f"task.make_datasets: the {split} set's {OWN_GENERATOR}"
    assert refusal(Drawing("own", ("random", "numpy", "torch"))) == own and refusal(Drawing("own")) == own
    for generator in ("random", "numpy", "torch"):
        others = tuple(name for name in ("random", "numpy", "torch") if name != generator)
        assert refusal(Drawing(generator, others)) == (
            f"task.make_datasets: the {split} set declares draws_from = {others!r}, but its samples change with the "
            f"{generator!r} generator: add {generator!r} to draws_from (or remove draws_from: all three generators "
            "are then seeded)")
    assert refusal(Drawing("torch", "torch")) == (
        f"task.make_datasets: the {split} set's draws_from is the string 'torch'; write a tuple of names, such as "
        "('torch',)")
    assert refusal(Drawing("torch", ("Torch",))).startswith(
        f"task.make_datasets: the {split} set's draws_from names 'Torch'; it may name only")


def test_a_generator_is_found_on_any_of_the_first_samples_and_only_there():
    """The check reads the first CHECKED_SAMPLES samples: a draw in the last of them is found, one
    after them is not (the docstring says so: declare every generator any sample may draw from)."""
    class DrawsAt(Drawing):
        def __init__(self, at: int) -> None:
            super().__init__("numpy", ())
            self.at = at

        def __getitem__(self, index: int):
            return super().__getitem__(index) if index == self.at else (torch.full((2,), float(index)), index)

    with pytest.raises(TaskError, match="change with the 'numpy' generator"):
        check_declared_draws(DrawsAt(CHECKED_SAMPLES - 1), Drawing(None))
    check_declared_draws(DrawsAt(CHECKED_SAMPLES), Drawing(None))
    with pytest.raises(TaskError, match="a generator of its own"):
        check_declared_draws(Drawing(None, ()), type("Own", (Drawing,), {"__len__": lambda self: 1})("own"))


def test_a_loss_cut_off_from_a_model_that_learns_is_refused_and_from_one_that_cannot_is_not():
    cut_off = regression_task(metrics_from_sums=lambda sums: {"loss": float(sums["squares"] / sums["count"])})
    with pytest.raises(TaskError, match="returned a 'loss' that does not depend on the model's parameters"):
        check_task(cut_off, nn.Linear(2, 1), validation_loader(), torch.device("cpu"), "fp32")
    frozen = nn.Linear(2, 1).requires_grad_(False)  # nothing to learn: a plain number is its loss
    assert check_task(cut_off, frozen, validation_loader(), torch.device("cpu"), "fp32") == ("loss",)


@pytest.mark.parametrize("frozen", ["the first layer", "a bias"])
def test_a_loss_cut_off_from_a_model_that_learns_in_part_only_is_refused(frozen):
    """A frozen backbone under a head that learns, or one frozen bias: the model still learns, so a
    loss made with .item() is refused before the run starts, not at its first backward pass."""
    cut_off = regression_task(metrics_from_sums=lambda sums: {"loss": float(sums["squares"] / sums["count"])})
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    (model[0] if frozen == "the first layer" else model[1].bias).requires_grad_(False)
    with pytest.raises(TaskError, match="returned a 'loss' that does not depend on the model's parameters"):
        check_task(cut_off, model, validation_loader(), torch.device("cpu"), "fp32")
    assert check_task(regression_task(), model, validation_loader(), torch.device("cpu"), "fp32") == ("loss",)
