"""Specifications of the task contract: a task that breaks a promise gets one line naming the
function and what it returned, exit 2, and no run in the folder."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine import contract
from {{ cookiecutter.project_slug }}.engine.contract import (
    CHECKED_SAMPLES,
    TaskError,
    check_declared_draws,
    check_task,
)
from {{ cookiecutter.project_slug }}.train import main
from {{ cookiecutter.project_slug }}.utils.data import make_loader

from conftest import FAST, HANG, PACKAGE, SRC, DrawsFrom, python_env

RUN_FILES = ("config.json", "environment.json", "metrics.csv", "checkpoints", "summary.json", "model.pt")
real_metrics, real_model, real_datasets = task.metrics_from_sums, task.make_model, task.make_datasets


class Doubled(nn.Module):
    """A model whose output has twice the batch's rows: it fits no task's targets."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs):
        outputs = self.model(inputs)
        return torch.cat([outputs, outputs])


def with_loss(change):
    return lambda sums: {**real_metrics(sums), "loss": change(real_metrics(sums)["loss"])}


def declaring(generator: str, declared: tuple[str, ...] | None, split: str = "training"):
    """make_datasets whose training (or validation) set draws from `generator` and declares `declared`."""
    def make_datasets(config):
        train_set, val_set = real_datasets(config)
        if split == "validation":
            return train_set, DrawsFrom(val_set, generator, declared)
        return DrawsFrom(train_set, generator, declared), val_set
    return make_datasets


BROKEN = {  # what is broken: (task attribute, replacement, words the one line must hold)
    "a loss that is not one number": (
        "metrics_from_sums", with_loss(lambda loss: loss.repeat(3)), "task.metrics_from_sums returned loss = a tensor"),
    "a metric that is NaN": (
        "metrics_from_sums", lambda sums: {**real_metrics(sums), "odd": torch.tensor(math.nan)}, "odd = nan"),
    "a metric that is infinite": (
        "metrics_from_sums", lambda sums: {**real_metrics(sums), "odd": torch.tensor(math.inf)}, "odd = inf"),
    "a metric named like a column": (
        "metrics_from_sums", lambda sums: {**real_metrics(sums), "step": 1.0}, "a figure named 'step'"),
    "no loss": (
        "metrics_from_sums", lambda sums: {k: v for k, v in real_metrics(sums).items() if k != "loss"}, "with 'loss'"),
    "a loss cut off from the model": (
        "metrics_from_sums", with_loss(lambda loss: loss.item()), "does not depend on the model's parameters"),
    "sums that are not a dict": (
        "batch_sums", lambda outputs, targets: outputs.sum(), "task.batch_sums returned Tensor"),
    "a headline the task does not return": (
        "HEADLINE_METRIC", "no_such_figure", "task.HEADLINE_METRIC is 'no_such_figure'"),
    "outputs that do not fit the targets": (
        "make_model", lambda config, train_set: Doubled(real_model(config, train_set)), "raised"),
    # draws_from (utils/data.py): a generator left out would draw differently in each worker.
    "a dataset that draws from random and leaves it out": (
        "make_datasets", declaring("random", ("numpy", "torch")), "samples change with the 'random' generator"),
    "a dataset that draws from numpy and leaves it out": (
        "make_datasets", declaring("numpy", ("torch",)), "samples change with the 'numpy' generator"),
    "a dataset that draws from torch and declares none": (
        "make_datasets", declaring("torch", ()), "samples change with the 'torch' generator"),
    # A generator of the dataset's own: no declaration fixes it, so none is suggested.
    "a validation set that draws from numpy and leaves it out": (
        "make_datasets", declaring("numpy", ("torch",), split="validation"),
        "the validation set declares draws_from = ('torch',), but its samples change with the 'numpy' generator"),
    "a dataset with a generator of its own that declares the others": (
        "make_datasets", declaring("own", ("random", "numpy", "torch")), "a generator of its own"),
    "a dataset with a generator of its own and no draws_from": (
        "make_datasets", declaring("own", None), "take its seed from torch.randint(2**62, ()) inside __getitem__"),
    "a draws_from that names no generator": (
        "make_datasets", declaring("torch", ("Torch",)), "draws_from names 'Torch'; it may name only"),
    "a draws_from that is a string, not a tuple": (
        "make_datasets", declaring("torch", "torch"), "draws_from is the string 'torch'; write a tuple"),
}


@pytest.mark.parametrize("case", BROKEN, ids=BROKEN)
def test_a_task_that_breaks_a_promise_is_refused_with_one_line_before_any_run_file(case, tmp_path, capsys, monkeypatch):
    attribute, replacement, words = BROKEN[case]
    monkeypatch.setattr(task, attribute, replacement)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(out), *FAST])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "the task does not keep its promises" in lines[0] and words in lines[0], lines
    assert not any((out / name).exists() for name in RUN_FILES)


def test_an_earlier_run_is_not_lost_to_a_broken_task_under_overwrite(runs, tmp_path, capsys, monkeypatch):
    import shutil

    copy = shutil.copytree(runs["seed7"].path, tmp_path / "copy")
    before = {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()}
    monkeypatch.setattr(task, "HEADLINE_METRIC", "no_such_figure")
    with pytest.raises(SystemExit):
        main(["--out", str(copy), *FAST, "--overwrite"])
    assert {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()} == before


def test_the_draws_check_passes_an_honest_declaration_and_leaves_the_generators_as_found():
    """It seeds and fetches samples before the model's weights are drawn: it must shift no draw."""
    import random

    import numpy as np

    train_set, val_set = real_datasets(Config())
    honest = DrawsFrom(train_set, "numpy", draws_from=("numpy",), samples=16)
    torch.manual_seed(5)
    before = random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state()
    check_declared_draws(honest, val_set)  # tries random and torch on its samples: they change nothing
    after = random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state()
    assert after[:2] == before[:2] and torch.equal(after[2], before[2])


def test_two_samples_are_the_same_only_when_every_part_is_equal_bit_for_bit():
    """The draws check calls a declaration honest when a generator it leaves out changes no sample:
    its comparison must see every kind of difference a sample can hold."""
    import numpy as np

    from {{ cookiecutter.project_slug }}.engine.contract import same

    t, a = torch.tensor([1.0, 2.0]), np.array([1.0, 2.0])
    sample = {"image": t, "array": a, "parts": [1, (2.5, "x")], "label": 3}
    assert same(sample, {"image": t.clone(), "array": a.copy(), "parts": [1, (2.5, "x")], "label": 3})
    assert same(object(), object())  # no equality of its own: the check cannot see in
    differs = [
        (t, torch.tensor([1.0, 2.5])), (t, t.double()), (t, t.reshape(2, 1)), (t, a),
        (torch.tensor([0.0]), torch.tensor([-0.0])),  # equal as numbers, not bit for bit
        (a, np.array([1.0, 2.5])), (a, a.astype(np.float32)), (a, a.reshape(2, 1)), (a, t),
        ([1, 2], [1, 3]), ([1, 2], [1, 2, 3]), ([1, 2], (1, 2)), ((1, [t]), (1, [t + 1])),
        ({"x": 1}, {"x": 2}), ({"x": 1}, {"y": 1}), ({"x": 1}, [1]), ({"x": t}, {"x": t + 1}),
        (3, 4), ("x", "y"),
    ]
    for left, right in differs:
        assert not same(left, right) and not same(right, left), (left, right)


# ---- The checks in this process, on a task of the test's own -------------------------------------
# The tests above refuse broken tasks through main(); these call the checks themselves, so that each
# refusal is seen word for word, and on a task of any shape (a regression here).


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
COLUMNS = "a name must be letters, digits and _, and not one of metrics.csv's own columns (epoch, step, split, lr)"


@pytest.mark.parametrize("figures, line", [
    ([LOSS], "task.metrics_from_sums returned list [tensor(0.5000, requires_grad=True)]; it must return a dict "
             "with 'loss' (what training minimises) and any other figures"),
    ({"accuracy": 1.0}, "task.metrics_from_sums returned dict {'accuracy': 1.0}; it must return a dict with 'loss' "
                        "(what training minimises) and any other figures"),
    ({"loss": LOSS, "top 5": 1.0}, f"task.metrics_from_sums returned a figure named 'top 5': {COLUMNS}"),
    ({"loss": LOSS, "lr": 1.0}, f"task.metrics_from_sums returned a figure named 'lr': {COLUMNS}"),
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


OWN_GENERATOR = ("samples differ from one read to the next with the global generators seeded alike: it draws from a "
                 "generator of its own (one made in __init__ or at import, such as np.random.default_rng() or "
                 "random.Random()), whose state depends on the worker and on what it read before, and which no "
                 "draws_from can fix: make it per sample, and take its seed from torch.randint(2**62, ()) inside "
                 "__getitem__ (the README's rules of a dataset)")


@pytest.mark.parametrize("split", ["training", "validation"])
def test_each_refusal_of_the_draws_check_names_the_set_and_says_what_to_do_word_for_word(split):
    train_set, val_set = real_datasets(Config())

    def refusal(dataset) -> str:
        with pytest.raises(TaskError) as refused:
            check_declared_draws(*((dataset, val_set) if split == "training" else (train_set, dataset)))
        return str(refused.value)

    checked = train_set if split == "training" else val_set
    assert refusal(DrawsFrom(checked, "own", ("random", "numpy", "torch"))) == (
        f"task.make_datasets: the {split} set's {OWN_GENERATOR}")
    assert refusal(DrawsFrom(checked, "numpy", ("torch",))) == (
        f"task.make_datasets: the {split} set declares draws_from = ('torch',), but its samples change with the "
        "'numpy' generator: add 'numpy' to draws_from (or remove draws_from: all three generators are then seeded)")
    assert refusal(DrawsFrom(checked, "torch", "torch")) == (
        f"task.make_datasets: the {split} set's draws_from is the string 'torch'; write a tuple of names, such as "
        "('torch',)")


@pytest.mark.parametrize("line, says", [
    ("from .engine.repro import seed_everything",
     "task.py imports {{ cookiecutter.project_slug }}.engine.repro, which is not there: it is now in "
     "{{ cookiecutter.project_slug }}.utils.repro"),
    ("from .utils.data import CtrlCSafeLoader",
     "task.py imports CtrlCSafeLoader from {{ cookiecutter.project_slug }}.utils.data, which is not there: it is now "
     "in {{ cookiecutter.project_slug }}.engine.loader"),
    ("import a_package_nobody_installed", "task.py needs the package 'a_package_nobody_installed', which is not "
     "installed here: list it in requirements-task.txt"),
], ids=["a module that moved", "a name that moved", "a package not installed"])
def test_a_task_py_that_imports_what_is_not_there_gets_one_line_naming_where_it_is_now(line, says, tmp_path):
    """A task.py written for an earlier layout of the package (CHANGELOG.md: what moved), or one whose
    own package is missing: train says so in one line and exits 2, not with a traceback."""
    copy = tmp_path / "src" / PACKAGE
    shutil.copytree(SRC / PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    text = (copy / "task.py").read_text(encoding="utf-8")
    future = "from __future__ import annotations\n"  # which must stay first
    text = text.replace(future, future + line + "\n", 1) if future in text else f"{line}\n{text}"
    (copy / "task.py").write_text(text, encoding="utf-8")
    env = python_env(PYTHONPATH=str(tmp_path / "src"))
    done = subprocess.run([sys.executable, "-m", f"{PACKAGE}.train", "--out", str(tmp_path / "run")], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG)
    (error,) = done.stderr.strip().splitlines()
    assert done.returncode == 2 and error.startswith(f"python -m {PACKAGE}.train: error: {says}"), done.stderr
    assert not (tmp_path / "run").exists()
