"""A step whose loss or gradients are not finite (NaN, inf) stops the run at that step (--nonfinite
stop, the default): one line naming the step and its samples, exit 1, and no checkpoint of the
broken state: the newest one from before it stands. With --nonfinite skip such a step is not taken
and the run goes on. The check rides on the metrics rows' read-back: no wait for the device per step.

The NaN is put into the model's outputs at one training step, whatever the task: the example's
classifier, a language model or a regression all get it the same way.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from {{ cookiecutter.project_slug }} import study, task, train, verify
from {{ cookiecutter.project_slug }}.engine.runs import read_run
from {{ cookiecutter.project_slug }}.utils.data import EpochSampler

from conftest import BATCH, FAST, PACKAGE, SAMPLES, settings, steps_per_epoch

POISONED_STEP = 3  # in the first epoch: a task has at least 64 samples, 4 steps of 16


class NaNAtStep(nn.Module):
    """The task's model, whose outputs turn to NaN at one training step (eval passes are not counted)."""

    def __init__(self, model: nn.Module, step: int) -> None:
        super().__init__()
        self.model, self.step, self.steps = model, step, 0

    def forward(self, inputs):
        outputs = self.model(inputs)
        if self.training:
            self.steps += 1
            if self.steps == self.step:
                outputs = outputs * float("nan")
        return outputs


@pytest.fixture
def nan_at_step(monkeypatch):
    make_model = task.make_model
    monkeypatch.setattr(task, "make_model", lambda config, train_set: NaNAtStep(make_model(config, train_set),
                                                                              POISONED_STEP))


def poisoned_run(tmp_path, *flags: str) -> tuple[int, str]:
    out = tmp_path / "run"
    code = train.main(["--out", str(out), *FAST, "--checkpoint-every", "2", *flags])
    return code, out


def test_a_non_finite_step_stops_the_run_there_naming_the_step_and_its_samples(nan_at_step, tmp_path, capsys):
    code, out = poisoned_run(tmp_path)
    assert code == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"stopped at step {POISONED_STEP} " in line and "not finite" in line and "--nonfinite skip" in line
    train_set, _ = task.make_datasets(settings())
    order = EpochSampler(min(len(train_set), SAMPLES), settings().seed, shuffle=True).order()
    samples = order[(POISONED_STEP - 1) * BATCH: POISONED_STEP * BATCH]
    assert f"its samples (indices in the training set): {', '.join(map(str, samples[:8]))}" in line
    assert not (out / "summary.json").exists() and (out / "error.log").exists()


def test_no_checkpoint_of_a_non_finite_state_is_written_the_one_from_before_stands(nan_at_step, tmp_path, capsys):
    _, out = poisoned_run(tmp_path)
    assert sorted(path.name for path in (out / "checkpoints").iterdir()) == ["step-00000002.pt"]
    checkpoint = torch.load(out / "checkpoints" / "step-00000002.pt", weights_only=True)
    assert all(torch.isfinite(tensor).all() for tensor in checkpoint["model"].values() if tensor.is_floating_point())
    assert "the newest, step-00000002.pt, stands" in capsys.readouterr().err
    run = read_run(out)
    assert run.non_finite_step == POISONED_STEP  # its row is written: the loss is seen going wrong
    assert all(math.isfinite(float(row["loss"])) for row in run.metrics if int(row["step"]) < POISONED_STEP)


@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_a_model_its_last_update_broke_is_never_saved_its_evaluation_stops_the_run(mode, tmp_path, capsys):
    """A step's loss is taken before its update, so the last update before an evaluation (an --lr far
    too high) can leave a model whose outputs are NaN with no step after it to see it: the
    evaluation's loss stops the run there, in either --nonfinite mode (a step skipped later cannot
    mend the model), before that model becomes a checkpoint or best.pt. The weights are made NaN
    at the first epoch's last update, whatever the task."""
    last_of_epoch_1, updates = steps_per_epoch(), []

    def break_the_model(optimizer, args, kwargs):
        updates.append(optimizer)
        if len(updates) == last_of_epoch_1:
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for parameter in group["params"]:
                        parameter.mul_(float("nan"))

    hook = register_optimizer_step_post_hook(break_the_model)
    try:
        code, out = poisoned_run(tmp_path, "--nonfinite", mode, "--keep-best", "min:loss")
    finally:
        hook.remove()
    assert code == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"stopped at step {last_of_epoch_1} (epoch 1): the validation loss is not finite" in line, line
    assert "stands" in line and "--nonfinite skip" not in line, line
    assert f"step-{last_of_epoch_1:08d}.pt" not in {path.name for path in (out / "checkpoints").iterdir()}
    assert not (out / "best.pt").exists() and not (out / "summary.json").exists()
    last = read_run(out).metrics[-1]
    assert (last["split"], int(last["step"]), math.isnan(float(last["loss"]))) == ("val", last_of_epoch_1, True)


def test_verify_treats_such_a_run_as_failed_in_one_line(nan_at_step, tmp_path, capsys):
    _, out = poisoned_run(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        verify.main([str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"stopped at step {POISONED_STEP}" in err and "--steps 2" in err


def test_with_nonfinite_skip_the_step_is_not_taken_and_the_run_trains_on_to_finite_weights(nan_at_step, tmp_path):
    code, out = poisoned_run(tmp_path, "--nonfinite", "skip")
    assert code == 0
    run = read_run(out)
    assert run.config["nonfinite"] == "skip" and run.non_finite_step == POISONED_STEP
    weights = torch.load(out / "model.pt", weights_only=True)
    assert all(torch.isfinite(tensor).all() for tensor in weights.values() if tensor.is_floating_point())
    # The negative control: the step that was skipped would have made every weight NaN.
    code, taken = poisoned_run(tmp_path / "taken", "--nonfinite", "stop")
    assert code == 1 and not (taken / "model.pt").exists()


# The same NaN for the training processes a study starts: Python imports sitecustomize at start,
# so a folder holding one, put on PYTHONPATH, reaches every child the study launches.
POISON = """
from {package} import task

class NaNAtStep(__import__("torch").nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.steps = model, 0

    def forward(self, inputs):
        outputs = self.model(inputs)
        if self.training:
            self.steps += 1
            if self.steps == {step}:
                outputs = outputs * float("nan")
        return outputs

make_model = task.make_model
task.make_model = lambda config, train_set: NaNAtStep(make_model(config, train_set))
"""


def test_a_study_counts_a_seed_whose_run_stopped_non_finite_as_failed(tmp_path, monkeypatch, capsys):
    poison = tmp_path / "poison"
    poison.mkdir()
    (poison / "sitecustomize.py").write_text(POISON.format(package=PACKAGE, step=POISONED_STEP))
    monkeypatch.setenv("PYTHONPATH", str(poison))
    assert study.main(["--seeds", "0", "--out", str(tmp_path / "study"), *FAST]) != 0
    err = capsys.readouterr().err
    assert "the run of seed 0 failed" in err
    log = (tmp_path / "study" / "logs" / "seed-0.log").read_text()
    assert f"stopped at step {POISONED_STEP}" in log and "not finite" in log  # and not for another reason
    assert not (tmp_path / "study" / "seed-0" / "summary.json").exists()  # the run stopped at the NaN


@pytest.mark.parametrize("loss", [1.0, math.inf, math.nan])
@pytest.mark.parametrize("gradient", [None, 0.5, math.inf, math.nan])
def test_a_step_is_finite_only_when_its_loss_and_every_gradient_are(loss, gradient):
    """An infinite loss with finite gradients (a constant that overflowed) stops the run too."""
    from {{ cookiecutter.project_slug }}.engine.loop import finite_step

    gradients = None if gradient is None else [torch.ones(3), torch.tensor([1.0, gradient])]
    expected = math.isfinite(loss) and (gradient is None or math.isfinite(gradient))
    assert bool(finite_step(torch.tensor(loss), gradients)) is expected
