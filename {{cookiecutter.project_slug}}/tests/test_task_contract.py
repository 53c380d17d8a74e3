"""Specifications of the task contract: a task that breaks a promise gets one line naming the
function and what it returned, exit 2, and no run in the folder."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys

import pytest
import torch
from torch import nn

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.contract import TaskError, check_declared_draws
from {{ cookiecutter.project_slug }}.train import main

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
