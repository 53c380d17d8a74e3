"""Specifications of mixed precision and torch.compile: the same proofs as for fp32 eager runs.

The runs here are marked `slow` (compiling takes about a minute a process on two cores) and are
left out of a plain `pytest`; run them with `pytest -m slow`, as the CI workflow does. The
in-process checks at the end (each precision's dtype, the loss scale through a checkpoint, the
refusals) are fast and always run, so that the plain tier sees each of these paths too.
"""

from __future__ import annotations

import shutil
import signal

import pytest
import torch

from {{ cookiecutter.project_slug }}.engine.checkpoint import TrainingState
from {{ cookiecutter.project_slug }}.engine.precision import autocast, make_scaler
from {{ cookiecutter.project_slug }}.train import main

from conftest import (
    FAST,
    once,
    precision_problem,
    read_run,
    start_held_at,
    start_module,
    steps_per_epoch,
    value_of,
    wait_until,
)

ARGS = (*FAST, "--seed", "7")
PLAIN = {  # uninterrupted runs: name -> extra flags
    "fp32": (),
    "bf16": ("--precision", "bf16"),
    "bf16_again": ("--precision", "bf16"),
    "fp16": ("--precision", "fp16"),
    "compiled": ("--compile",),
    "compiled_again": ("--compile",),
}
KILLED = {  # killed with SIGKILL (with its process group) mid-epoch, then resumed
    "fp16_killed": ("--precision", "fp16"),
    "compiled_killed": ("--compile",),
}


def problem_of(extra: tuple[str, ...]) -> str | None:
    """Why a run with these flags cannot train on this CPU (conftest.precision_problem), or None."""
    return precision_problem(extra[extra.index("--precision") + 1]) if "--precision" in extra else None


def precision_runs(root):
    """Every run of PLAIN and KILLED whose precision the task's model can train in on this CPU."""
    plain = {name: extra for name, extra in PLAIN.items() if not problem_of(extra)}
    killed = {name: extra for name, extra in KILLED.items() if not problem_of(extra)}
    processes = {name: start_module("train", "--out", str(root / name), *ARGS, *extra, log=root / f"{name}.log")
                 for name, extra in plain.items()}
    held = {name: start_held_at(steps_per_epoch() - 2, root / name, "--out", str(root / name), *ARGS, *extra,
                                hash_seed="7")
            for name, extra in killed.items()}
    for name, (process, marker) in held.items():
        wait_until(marker.exists, process, "reaching its step")
        process.kill_group(signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
        processes[name] = start_module("train", "--out", str(root / name), "--resume", log=root / f"{name}-resumed.log")
    for name, process in processes.items():
        assert process.wait() == 0, f"{name}: {process.stderr[-3000:]}"
    return {name: read_run(root / name) for name in processes}


@pytest.fixture(scope="module")
def runs_or_failure(tmp_path_factory):
    return once(lambda: precision_runs(tmp_path_factory.mktemp("precision")))


@pytest.fixture
def precision(runs_or_failure, request):
    return value_of(runs_or_failure, request)


def ran(runs: dict, *names: str) -> None:
    """Skips the test, with the reason, unless every run it names could train on this CPU."""
    for name in names:
        if name not in runs:
            pytest.skip(problem_of({**PLAIN, **KILLED}[name]))


def final_scaler_state(run):
    newest = sorted((run.path / "checkpoints").glob("step-*.pt"))[-1]
    return torch.load(newest, weights_only=True)["scaler"]


@pytest.mark.slow
def test_two_bf16_runs_in_fresh_processes_are_bitwise_equal_and_differ_from_fp32(precision):
    ran(precision, "bf16", "bf16_again")
    first, second = precision["bf16"], precision["bf16_again"]
    assert first.config["precision"] == "bf16"
    assert first.metrics == second.metrics and first.weights == second.weights
    assert first.weights != precision["fp32"].weights  # the negative control: autocast was in effect


@pytest.mark.slow
def test_an_fp16_run_killed_mid_epoch_and_resumed_equals_the_run_never_stopped(precision):
    ran(precision, "fp16_killed", "fp16")
    resumed, reference = precision["fp16_killed"], precision["fp16"]
    assert resumed.metrics == reference.metrics
    assert resumed.weights == reference.weights
    assert resumed.weights != precision["fp32"].weights
    # The GradScaler's state went through the checkpoint: a fresh scaler would count its growth
    # interval from the resume on, and end with another state.
    assert final_scaler_state(resumed) == final_scaler_state(reference)
    assert final_scaler_state(reference)["_growth_tracker"] > 0


@pytest.mark.slow
def test_fp16_is_not_bf16(precision):
    """Each mixed precision is its own path: an fp16 run that silently ran as bf16 would pass
    every test that compares fp16 with fp32 or with itself."""
    ran(precision, "fp16", "bf16")
    assert precision["fp16"].weights != precision["bf16"].weights
    assert precision["fp16"].train_losses != precision["bf16"].train_losses


@pytest.mark.slow
def test_a_compiled_runs_first_step_matches_eager_to_rounding_and_the_runs_then_part(precision):
    """What the README says of --compile: not bitwise eager, but the same computation."""
    compiled, eager = precision["compiled"], precision["fp32"]
    first_compiled, first_eager = float(compiled.train_losses[0]), float(eager.train_losses[0])
    assert first_compiled == pytest.approx(first_eager, rel=1e-5)
    assert compiled.weights != eager.weights


@pytest.mark.slow
def test_two_compiled_runs_in_fresh_processes_are_bitwise_equal(precision):
    first, second = precision["compiled"], precision["compiled_again"]
    assert first.config["compile"] is True
    assert first.metrics == second.metrics and first.weights == second.weights


@pytest.mark.slow
def test_a_compiled_run_killed_and_resumed_equals_the_compiled_run_never_stopped(precision):
    assert precision["compiled_killed"].metrics == precision["compiled"].metrics
    assert precision["compiled_killed"].weights == precision["compiled"].weights


@pytest.mark.slow
def test_a_resume_whose_checkpoint_lacks_the_scaler_state_is_refused_not_reset(precision, tmp_path, capsys):
    ran(precision, "fp16")
    copy = shutil.copytree(precision["fp16"].path, tmp_path / "copy")
    (copy / "summary.json").unlink()  # make it look interrupted
    for path in (copy / "checkpoints").glob("step-*.pt"):  # as an older version would have saved them
        state = torch.load(path, weights_only=True)
        del state["scaler"]
        torch.save(state, path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(copy), "--resume"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no GradScaler state" in err[0]


def refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0]
    return lines[0]


def test_a_precision_the_device_cannot_run_gets_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    def no_autocast(*args, **kwargs):
        raise RuntimeError("User specified an unsupported autocast device_type 'cpu'")

    monkeypatch.setattr(torch, "autocast", no_autocast)  # as on a device without fp16 kernels
    line = refused(["--out", str(tmp_path / "run"), "--device", "cpu", "--precision", "fp16"], capsys)
    assert "--precision fp16 is not available on cpu" in line
    assert not (tmp_path / "run" / "config.json").exists()


def test_compile_without_a_cpp_compiler_gets_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    line = refused(["--out", str(tmp_path / "run"), "--device", "cpu", "--compile"], capsys)
    assert "--compile on the CPU needs a C++ compiler" in line
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_each_precision_computes_in_its_own_dtype(precision, dtype):
    """The dtype written out, not read from the code's table: fp16 that ran as bf16 would fail."""
    with autocast(precision, torch.device("cpu")):
        product = torch.ones(4, 4) @ torch.ones(4, 4)
    assert product.dtype == dtype


def test_the_fp16_loss_scale_goes_through_a_checkpoint():
    """A resumed fp16 run takes up the loss scale where it was: not the initial 65536 again."""
    def state() -> TrainingState:
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        return TrainingState(model, optimizer, scheduler, make_scaler("fp16", torch.device("cpu")))

    saved = state()
    saved.scaler.scale(torch.ones(()))  # the scaler makes its scale on first use
    saved.scaler.update(new_scale=1024.0)  # as after a few overflows
    resumed = state()
    resumed.load_checkpoint(saved.to_checkpoint({}, 0.0))
    assert resumed.scaler.get_scale() == 1024.0
