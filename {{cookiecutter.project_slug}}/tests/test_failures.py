"""Specifications of a run that fails in the task's own code (the dataset, the model): it keeps what
it has done, says in one line where it failed, and a resume continues exactly once it is fixed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.endings import newest_checkpoint_of
from {{ cookiecutter.project_slug }}.train import first, main
from {{ cookiecutter.project_slug }}.utils.data import EpochSampler

from conftest import BATCH, FAST, PACKAGE, SAMPLES, once, python_env, read_run, start, start_module, value_of

# The task's training set, made to raise for one sample when FAIL_AT_SAMPLE names it (a corrupt
# file, say): set for the first run, unset once "fixed".
FAILING_DATASET = """
import os, sys
from {package} import task
make_datasets = task.make_datasets

class Failing:
    def __init__(self, dataset):
        self.dataset = dataset
    def __len__(self):
        return len(self.dataset)
    def __getitem__(self, index):
        if str(index) == os.environ.get("FAIL_AT_SAMPLE"):
            raise ValueError("cannot decode file %d.png" % index)
        return self.dataset[index]
    def __getattr__(self, name):
        return getattr(self.__dict__["dataset"], name)

def failing_datasets(config):
    train_set, val_set = make_datasets(config)
    return Failing(train_set), val_set

task.make_datasets = failing_datasets
from {package}.train import main
sys.exit(main(sys.argv[1:]))
"""
FAILING_STEP = 6  # the step whose batch holds the broken sample: steps 1-5 complete, a checkpoint at 4


def sample_in_step(step: int, seed: int) -> int:
    """The index of a sample that the given step of epoch 1 trains on (the third of its batch)."""
    size = len(first(task.make_datasets(Config(seed=seed))[0], SAMPLES))
    return EpochSampler(size, seed, shuffle=True).order()[(step - 1) * BATCH + 2]


def failed_then_resumed(root: Path) -> dict:
    index = sample_in_step(FAILING_STEP, seed=7)
    failing = start([sys.executable, "-c", FAILING_DATASET.format(package=PACKAGE), *FAST, "--seed", "7",
                     "--num-workers", "2", "--out", str(root / "run")], root / "failing.log",
                    env=python_env(PYTHONHASHSEED="7", FAIL_AT_SAMPLE=str(index)))
    code, stderr = failing.wait(), failing.stderr
    checkpoints = sorted(path.name for path in (root / "run" / "checkpoints").glob("step-*.pt"))
    error_log = (root / "run" / "error.log").read_text()
    resumed = start_module("train", "--out", str(root / "run"), "--resume", log=root / "resumed.log")
    assert resumed.wait() == 0, resumed.stderr[-3000:]
    return {"code": code, "stderr": stderr, "index": index, "checkpoints": checkpoints, "error_log": error_log,
            "error_log_after_the_resume": (root / "run" / "error.log").exists(), "run": read_run(root / "run")}


@pytest.fixture(scope="module")
def failure_or_setup_failure(tmp_path_factory):
    return once(lambda: failed_then_resumed(tmp_path_factory.mktemp("failure")))


@pytest.fixture
def failure(failure_or_setup_failure, request):
    return value_of(failure_or_setup_failure, request)


def test_the_failures_error_log_goes_once_the_run_resumed_and_finished(failure):
    """A stale error.log would describe a run that no longer failed."""
    assert failure["error_log"] and not failure["error_log_after_the_resume"]


def test_a_dataset_error_in_a_worker_is_one_line_naming_the_sample_and_its_message(failure):
    assert failure["code"] == 1
    lines = failure["stderr"].strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert f"stopped at step {FAILING_STEP - 1}: the dataset failed on sample {failure['index']} (epoch 1): " \
           f"ValueError: cannot decode file {failure['index']}.png" in lines[0]
    assert "error.log" in lines[0] and "--resume" in lines[0]


def test_the_full_traceback_is_kept_in_the_run_folder(failure):
    assert "Traceback" in failure["error_log"] and f"cannot decode file {failure['index']}.png" in failure["error_log"]


def test_the_checkpoint_a_failure_names_as_standing_is_the_newest(tmp_path):
    """What the failure and non-finite lines name as the checkpoint to resume from: the newest of
    those kept (written by the run or by hand, in any order), or none."""
    (tmp_path / "checkpoints").mkdir()
    assert newest_checkpoint_of(tmp_path) is None
    for step in (8, 12, 4):
        (tmp_path / "checkpoints" / f"step-{step:08d}.pt").write_bytes(b"")
    assert newest_checkpoint_of(tmp_path) == "step-00000012.pt"


def test_a_failed_run_first_checkpoints_its_last_completed_step(failure):
    assert f"step-{FAILING_STEP - 1:08d}.pt" in failure["checkpoints"]


def test_once_fixed_a_failed_run_resumes_to_the_weights_of_a_run_that_never_failed(failure, runs):
    assert failure["run"].metrics == runs["seed7"].metrics
    assert failure["run"].weights == runs["seed7"].weights


def test_a_run_that_fails_before_its_first_step_leaves_nothing_that_blocks_a_plain_rerun(tmp_path, capsys, monkeypatch):
    real = task.make_datasets

    def no_data(config):
        raise FileNotFoundError("data/train.csv")

    out = tmp_path / "run"
    monkeypatch.setattr(task, "make_datasets", no_data)
    assert main(["--out", str(out), *FAST, "--epochs", "1"]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "failed before its first step: FileNotFoundError: data/train.csv" in line
    assert "run the same command again" in line
    with pytest.raises(SystemExit):  # --resume, tried all the same, says why there is nothing to resume
        main(["--out", str(out), "--resume"])
    assert "failed before its first step" in capsys.readouterr().err
    monkeypatch.setattr(task, "make_datasets", real)
    assert main(["--out", str(out), *FAST, "--epochs", "1"]) == 0  # no --overwrite needed


def test_a_run_that_fails_inside_its_first_step_leaves_nothing_that_blocks_a_plain_rerun(tmp_path, capsys, monkeypatch):
    """The run folder had its config, environment and metrics header when the step began: a failure
    there leaves only error.log, so the same command, once fixed, runs without --overwrite."""
    real = task.make_model

    def failing_model(config, train_set):
        model = real(config, train_set)
        forward = model.forward

        def forward_that_fails_in_training(inputs):
            if model.training:
                raise RuntimeError("shape mismatch in my layer")
            return forward(inputs)

        model.forward = forward_that_fails_in_training
        return model

    out = tmp_path / "run"
    monkeypatch.setattr(task, "make_model", failing_model)
    assert main(["--out", str(out), *FAST, "--epochs", "1"]) == 1
    assert "failed before its first step: RuntimeError: shape mismatch" in capsys.readouterr().err
    assert sorted(path.name for path in out.iterdir()) == ["error.log"]
    monkeypatch.setattr(task, "make_model", real)
    assert main(["--out", str(out), *FAST, "--epochs", "1"]) == 0


def test_a_model_that_fails_mid_run_keeps_the_steps_before_and_names_the_line(tmp_path, capsys, monkeypatch):
    real = task.make_model
    calls = []

    def failing_model(config, train_set):
        model = real(config, train_set)
        forward = model.forward

        def forward_that_fails_on_step_3(inputs):
            calls.append(model.training)
            if calls.count(True) == 3:
                raise RuntimeError("shape mismatch in my layer")
            return forward(inputs)

        model.forward = forward_that_fails_on_step_3
        return model

    monkeypatch.setattr(task, "make_model", failing_model)
    out = tmp_path / "run"
    assert main(["--out", str(out), *FAST]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "stopped at step 2: RuntimeError: shape mismatch in my layer (in test_failures.py, line " in line
    assert (out / "checkpoints" / "step-00000002.pt").exists() and (out / "error.log").exists()


def test_an_op_that_strict_mode_refuses_is_explained_in_one_line():
    """What a run that strict mode stops says (engine/endings.py), for the op tests/test_repro.py refuses."""
    from {{ cookiecutter.project_slug }}.engine.endings import explain_nondeterministic_error
    from {{ cookiecutter.project_slug }}.utils.repro import configure_determinism

    pooled, indices = torch.nn.functional.max_pool2d(torch.rand(1, 1, 4, 4), 2, return_indices=True)
    configure_determinism("strict")
    with pytest.raises(RuntimeError) as refused:
        torch.nn.functional.max_unpool2d(pooled, indices, 2)  # documented as having no deterministic kernel
    line = explain_nondeterministic_error(refused.value, "cuda")
    assert "max_unpooling2d_forward_out" in line and "--deterministic warn" in line and "on the CPU" in line
    assert "\n" not in line
    assert "on the CPU" not in explain_nondeterministic_error(refused.value, "cpu")  # already there
    assert explain_nondeterministic_error(RuntimeError("out of memory"), "cpu") is None


def test_a_full_disk_says_no_space_left_and_what_checkpoints_really_holds(tmp_path, monkeypatch, capsys):
    """torch.save reports a full disk as a RuntimeError of its zip writer, raised while handling the
    OSError (ENOSPC): the line says what happened, and that no checkpoint is there to resume from."""
    import errno

    def full_disk(obj, file):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0") from None

    monkeypatch.setattr(torch, "save", full_disk)
    out = tmp_path / "run"
    assert main(["--out", str(out), *FAST]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no space left on device (" in line and "enforce fail" not in line
    assert "it has no checkpoint to resume from" in line and "stands" not in line
    assert list((out / "checkpoints").glob("*")) == []  # no half-written checkpoint left behind
