"""Specifications of the task contract: a task that breaks a promise gets one line naming the
function and what it returned, exit 2, and no run in the folder."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.train import main

from conftest import FAST

RUN_FILES = ("config.json", "environment.json", "metrics.csv", "checkpoints", "summary.json", "model.pt")
real_metrics, real_model = task.metrics_from_sums, task.make_model


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


BROKEN = {  # what is broken: (task attribute, replacement, words the one line must hold)
    "a loss that is not one number": (
        "metrics_from_sums", with_loss(lambda loss: loss.repeat(3)), "task.metrics_from_sums returned loss = a tensor"),
    "a metric that is NaN": (
        "metrics_from_sums", lambda sums: {**real_metrics(sums), "odd": torch.tensor(math.nan)}, "odd = nan"),
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
