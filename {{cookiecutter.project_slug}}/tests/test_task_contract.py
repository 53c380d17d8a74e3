"""Specifications of the task contract: a task that breaks a promise gets one line naming the
function and what it returned, exit 2, and no run in the folder."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.train import main

from conftest import FAST, DrawsFrom

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

    from {{ cookiecutter.project_slug }}.config import Config
    from {{ cookiecutter.project_slug }}.engine.contract import check_declared_draws

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
