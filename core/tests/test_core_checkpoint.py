"""engine/checkpoint.py: the newest intact checkpoint is found; a cut-short, foreign or unsafe one is
skipped (an unsafe one is never executed); a checkpoint restores what the next step depends on."""

from __future__ import annotations

import os
import pickle
import shlex
import warnings
from pathlib import Path

import pytest
import torch
from repro_core.engine.checkpoint import (
    FORMAT_VERSION,
    KEEP_LAST,
    TrainingState,
    checkpoint_path,
    load_latest_checkpoint,
    read_checkpoint,
    read_model_weights,
    read_sharded_checkpoint,
    replace_folder,
    save_checkpoint,
    save_sharded_checkpoint,
)
from repro_core.utils.repro import state_dict_sha256
from torch import nn


class RunsAShellCommand:
    """Unpickling this calls os.system: what a malicious checkpoint would hold."""

    def __init__(self, marker: Path) -> None:
        self.command = f"touch {shlex.quote(str(marker))}"

    def __reduce__(self) -> tuple:
        return os.system, (self.command,)


def hand_made(folder: Path, steps: range) -> None:
    """Checkpoints as save_checkpoint writes them, each holding its step as a tensor."""
    for step in steps:
        save_checkpoint(folder, {"step": step, "weights": torch.full((3,), float(step))})


def newest(folder: Path) -> int | None:
    found = load_latest_checkpoint(folder)
    if found is None:
        return None
    state, path = found
    assert path == checkpoint_path(folder, state["step"])
    assert torch.equal(state["weights"], torch.full((3,), float(state["step"])))
    return state["step"]


def test_the_newest_checkpoint_is_found_and_only_the_last_few_are_kept(tmp_path: Path) -> None:
    hand_made(tmp_path, range(8, 13))  # 8 .. 12: step 10 sorts after step 9 by its zero-padded name
    assert sorted(path.name for path in tmp_path.glob("step-*.pt")) == [
        f"step-{step:08d}.pt" for step in range(13 - KEEP_LAST, 13)]
    assert newest(tmp_path) == 12
    state, problem = read_checkpoint(checkpoint_path(tmp_path, 12))
    assert problem is None and state["format_version"] == FORMAT_VERSION


def test_no_checkpoint_gives_none(tmp_path: Path) -> None:
    assert load_latest_checkpoint(tmp_path) is None


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.0])
def test_a_checkpoint_cut_short_is_skipped_for_the_one_before(tmp_path: Path, keep: float,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    hand_made(tmp_path, range(1, 4))
    path = checkpoint_path(tmp_path, 3)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    assert newest(tmp_path) == 2
    warning = capsys.readouterr().err
    assert f"skipping damaged checkpoint {path}" in warning


def test_every_checkpoint_damaged_gives_none(tmp_path: Path) -> None:
    hand_made(tmp_path, range(1, 3))
    for path in tmp_path.glob("step-*.pt"):
        path.write_bytes(path.read_bytes()[:100])
    assert load_latest_checkpoint(tmp_path) is None


def test_a_checkpoint_that_would_run_code_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hand_made(tmp_path, range(1, 3))
    evil = checkpoint_path(tmp_path, 3)
    torch.save({"format_version": FORMAT_VERSION, "step": 3, "weights": RunsAShellCommand(marker)}, evil)
    # control: loaded the unsafe way, the file does run its command
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.load(evil, weights_only=False)
    assert marker.exists()
    marker.unlink()

    state, problem = read_checkpoint(evil)
    assert state is None and "could run code" in problem
    assert newest(tmp_path) == 2
    assert not marker.exists()


@pytest.mark.parametrize("content", ["old format", "newer format", "no format", "not a dict", "plain pickle", "text"])
def test_a_checkpoint_of_another_format_is_skipped(tmp_path: Path, content: str) -> None:
    """A newer release's checkpoint too: its fields may mean what this code does not know."""
    hand_made(tmp_path, range(1, 3))
    path = checkpoint_path(tmp_path, 3)
    if content in ("old format", "newer format"):
        torch.save({"format_version": FORMAT_VERSION + (1 if content == "newer format" else -1), "step": 3}, path)
    elif content == "no format":
        torch.save({"step": 3}, path)
    elif content == "not a dict":
        torch.save(torch.zeros(3), path)
    elif content == "plain pickle":  # torch.save's legacy format: no zip archive
        torch.save({"format_version": FORMAT_VERSION, "step": 3}, path, _use_new_zipfile_serialization=False)
    else:
        path.write_text("step 3\n")
    state, problem = read_checkpoint(path)
    assert state is None and problem
    assert newest(tmp_path) == 2


# --- sharded checkpoints (folders written by torch.distributed.checkpoint) ------------------------------------


@pytest.fixture
def sharded(tmp_path: Path) -> Path:
    """A checkpoint folder as --parallel fsdp writes it, made with DCP in this one process."""
    import torch.distributed.checkpoint as dcp

    path = tmp_path / "step-00000004"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"model.weight": torch.arange(64.0)}, storage_writer=dcp.FileSystemWriter(path))
    torch.save({"format_version": FORMAT_VERSION, "step": 4}, path / "state.pt")
    return path


def test_a_whole_sharded_checkpoint_reads(sharded: Path) -> None:
    state, problem = read_sharded_checkpoint(sharded)
    assert problem is None and state["step"] == 4 and state["sharded"] is True
    found = load_latest_checkpoint(sharded.parent, sharded=True)
    assert found is not None and found[1] == sharded


def test_a_sharded_checkpoint_with_a_shard_cut_short_or_missing_is_refused(sharded: Path) -> None:
    (shard,) = sharded.glob("*.distcp")
    shard.write_bytes(shard.read_bytes()[:-8])
    assert "truncated" in read_sharded_checkpoint(sharded)[1]
    shard.unlink()
    assert "missing" in read_sharded_checkpoint(sharded)[1]
    assert load_latest_checkpoint(sharded.parent, sharded=True) is None


def test_a_sharded_checkpoints_metadata_that_would_run_code_is_refused(sharded: Path) -> None:
    marker = sharded.parent / "ran"
    (sharded / ".metadata").write_bytes(pickle.dumps(RunsAShellCommand(marker)))
    state, problem = read_sharded_checkpoint(sharded)
    assert state is None and "could run code" in problem
    assert not marker.exists()


def folder_of(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "state.pt").write_text(text)
    return path


@pytest.mark.parametrize("left_by_a_kill", [False, True], ids=["nothing left", "a stale .old folder left"])
def test_a_complete_folder_replaces_the_checkpoint_of_its_step_whatever_an_earlier_kill_left(
        tmp_path: Path, left_by_a_kill: bool) -> None:
    """A second checkpoint at one step goes through .step-N.old; a kill between the two renames of
    an earlier save leaves that folder behind, full: the next save at the step still replaces the
    checkpoint, and leaves only it."""
    path = folder_of(tmp_path / "step-00000008", "the first save")
    if left_by_a_kill:
        folder_of(tmp_path / ".step-00000008.old", "an earlier save, half replaced")
    replace_folder(folder_of(tmp_path / ".step-00000008.partial", "the second save"), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000008"]
    assert (path / "state.pt").read_text() == "the second save"


def stack_global_call(module: str, name: str, argument: str) -> bytes:
    """A protocol-4 pickle that calls module.name(argument): STACK_GLOBAL resolves a dotted `name`
    attribute by attribute."""

    def text(value: str) -> bytes:
        data = value.encode()
        return b"\x8c" + bytes([len(data)]) + data

    return b"\x80\x04" + text(module) + text(name) + b"\x93" + text(argument) + b"\x85R."


@pytest.mark.parametrize(("module", "name"), [
    ("torch.distributed.checkpoint.metadata", "os.system"),  # the allowed module imports os
    ("torch.distributed.checkpoint.metadata", "dataclass"),  # a name it imported, not a record of its own
    ("torch", "os.system"),
    ("pathlib", "PosixPath.touch"),
])
def test_a_metadata_name_that_reaches_past_dcps_own_records_is_refused_unrun(sharded: Path, module: str,
                                                                             name: str) -> None:
    marker = sharded.parent / "ran"
    (sharded / ".metadata").write_bytes(stack_global_call(module, name, f"touch {shlex.quote(str(marker))}"))
    state, problem = read_sharded_checkpoint(sharded)
    assert state is None and "could run code" in problem
    assert not marker.exists()
    # the control: the same call through plain pickle runs it (os.system exists, and is reached)
    if name == "os.system":
        pickle.loads(stack_global_call(module, name, f"touch {shlex.quote(str(marker))}"))
        assert marker.exists()


# --- what a checkpoint restores -------------------------------------------------------------------------------


def training_state() -> TrainingState:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return TrainingState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))


def take_step(state: TrainingState) -> None:
    x = torch.linspace(-1, 1, 12).reshape(4, 3) * (state.step + 1)
    loss = state.model(x).pow(2).mean()
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    state.scheduler.step()
    state.step += 1
    state.epoch_step += 1


def test_a_resume_from_a_checkpoint_takes_the_step_the_run_that_never_stopped_took(tmp_path: Path) -> None:
    """Momentum and the schedule are in the checkpoint: without them the next step would differ."""
    run = training_state()
    take_step(run)
    take_step(run)
    save_checkpoint(tmp_path, run.to_checkpoint({"seed": 1}, seconds=2.5))
    take_step(run)

    resumed = training_state()
    checkpoint, _ = load_latest_checkpoint(tmp_path)
    resumed.load_checkpoint(checkpoint)
    assert (resumed.step, resumed.epoch_step, resumed.train_seconds) == (2, 2, 2.5)
    assert checkpoint["config"] == {"seed": 1}
    take_step(resumed)
    assert state_dict_sha256(resumed.model.state_dict()) == state_dict_sha256(run.model.state_dict())

    fresh = training_state()  # control: the weights alone do not make the same step
    fresh.model.load_state_dict(checkpoint["model"])
    fresh.step = 2
    take_step(fresh)
    assert state_dict_sha256(fresh.model.state_dict()) != state_dict_sha256(run.model.state_dict())


def test_a_resume_restores_the_schedules_position_and_fp16s_loss_scale(tmp_path: Path) -> None:
    """A StepLR's next rate follows from the optimizer's own, restored with it; a warm-up or a cosine
    (LambdaLR) computes it from the schedule's own step count; and fp16's loss scale, grown or cut
    by the steps before, is no default."""
    run = training_state()
    run.scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    take_step(run)
    take_step(run)
    save_checkpoint(tmp_path, run.to_checkpoint({}, seconds=0.0))
    resumed = training_state()
    resumed.scaler = torch.amp.GradScaler("cpu")
    assert resumed.scheduler.state_dict() != run.scheduler.state_dict()  # the control: a fresh one is not
    resumed.load_checkpoint(load_latest_checkpoint(tmp_path)[0])
    assert resumed.scheduler.state_dict() == run.scheduler.state_dict()
    assert resumed.scaler.get_scale() == 8.0 != torch.amp.GradScaler("cpu").get_scale()


def test_a_sharded_checkpoint_resumes_the_optimizers_learning_rate_not_a_fresh_ones(tmp_path: Path) -> None:
    """--parallel fsdp's checkpoint (a DCP folder, made here in one process): the optimizer's param
    groups (their lr, which the schedule has moved) come back from the checkpoint; a fresh optimizer's
    (lr 0.1, where the run had gone on at 0.0125) would train the steps after a resume at the wrong rate."""
    run = training_state()
    for _ in range(3):
        take_step(run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP in a single process
        save_sharded_checkpoint(tmp_path, run, {}, seconds=0.0)
        checkpoint, path = load_latest_checkpoint(tmp_path, sharded=True)
        resumed = training_state()
        assert resumed.optimizer.param_groups[0]["lr"] == 0.1  # the control: a fresh one's
        resumed.load_checkpoint(checkpoint, path)
    assert [group["lr"] for group in resumed.optimizer.param_groups] == [0.1 * 0.5**3] == [
        group["lr"] for group in run.optimizer.param_groups]
    assert resumed.scheduler.state_dict() == run.scheduler.state_dict() and resumed.step == 3
    assert state_dict_sha256(resumed.model.state_dict()) == state_dict_sha256(run.model.state_dict())


def test_a_checkpoint_of_another_format_is_refused_as_a_models_weights_too(tmp_path: Path) -> None:
    """evaluate and --init-from take a checkpoint file as well as a model.pt: one this code does not
    read as a checkpoint (an older format's, whose fields may mean otherwise) is not read for its weights."""
    model = nn.Linear(3, 2)
    path = tmp_path / "old.pt"
    torch.save({"format_version": FORMAT_VERSION - 1, "model": model.state_dict(), "step": 3}, path)
    with pytest.raises(ValueError, match="cannot be loaded: .*format"):
        read_model_weights(path)
    torch.save({"format_version": FORMAT_VERSION, "model": model.state_dict(), "step": 3}, path)  # the control
    weights, step = read_model_weights(path)
    assert step == 3 and state_dict_sha256(weights) == state_dict_sha256(model.state_dict())


@pytest.mark.parametrize("content", [{}, {"weight": "a string"}, [torch.ones(2)]],
                         ids=["an empty mapping", "a mapping to a string", "a list of tensors"])
def test_a_file_that_holds_no_models_weights_is_refused_in_one_line(content: object, tmp_path: Path) -> None:
    """evaluate and --init-from read a model.pt: a file of no model's weights is named in one line,
    not loaded into a model as if it held some (an empty one would load into a model without any)."""
    path = tmp_path / "model.pt"
    torch.save(content, path)
    with pytest.raises(ValueError, match="holds no state_dict"):
        read_model_weights(path)
    torch.save({"weight": torch.ones(2)}, path)  # the negative control: a state_dict reads
    weights, step = read_model_weights(path)
    assert step is None and list(weights) == ["weight"] and torch.equal(weights["weight"], torch.ones(2))


def test_a_checkpoint_folder_killed_while_it_was_deleted_is_out_of_sight_of_a_resume(tmp_path, monkeypatch) -> None:
    """remove_folder renames first, then deletes: a kill in between (here the deletion does nothing)
    leaves a hidden folder that no resume lists, not a half-deleted step-N that it would try."""
    from repro_core.engine import checkpoint
    from repro_core.engine.checkpoint import checkpoint_paths, remove_folder, sharded_checkpoint_path

    step = sharded_checkpoint_path(tmp_path, 4)
    step.mkdir()
    (step / "state.pt").write_bytes(b"half")
    monkeypatch.setattr(checkpoint.shutil, "rmtree", lambda path, ignore_errors=False: None)  # killed here
    remove_folder(step)
    assert checkpoint_paths(tmp_path, sharded=True) == []
    assert [path.name.startswith(".") for path in tmp_path.iterdir()] == [True]
