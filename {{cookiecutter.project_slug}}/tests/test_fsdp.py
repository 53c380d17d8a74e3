"""Specifications of --parallel fsdp (FSDP2, sharded checkpoints) and of a resume with another
world size, under torchrun: gloo processes on the CPU, started the way users start them.

The tests that need torchrun's runs are marked `distributed` (selected with `pytest -m
distributed`); those that start no process (the sharded checkpoint's files, the refusals made
before a process group is joined without a launch, the evaluation passes, the world sizes'
history kept on resume) run in plain `pytest`. One set-up starts every run at once, in two
rounds: the runs, and the resumes of those that were stopped. A global batch of 12 lets 1, 2 and
3 processes share every step; 100 samples leave 4 for an epoch's last step (3 processes pad them to 6), and
give 3 processes 34, 33 and 33 validation samples: 4, 3 and 3 evaluation batches of 11, which FSDP
must still run in step (every forward pass gathers weights from every rank).
"""

from __future__ import annotations

import functools
import json
import math
import os
import pickle
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.project_slug }} import compare, plot, study, task, verify
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine import distributed
from {{ cookiecutter.project_slug }}.engine.checkpoint import (
    KEEP_LAST,
    read_checkpoint,
    read_sharded_checkpoint,
    save_sharded_checkpoint,
)
from {{ cookiecutter.project_slug }}.engine.world_sizes import history_on_resume
from {{ cookiecutter.project_slug }}.train import main
from {{ cookiecutter.project_slug }}.utils.repro import state_dict_sha256

from conftest import (
    PACKAGE,
    held_at_step_code,
    once,
    python_env,
    read_run,
    start,
    torchrun,
    two_nodes,
    value_of,
    wait_until,
)

SAMPLES, BATCH = 100, 12
FLAGS = ("--epochs", "2", "--device", "cpu", "--checkpoint-every", "4", "--max-samples", str(SAMPLES),
         "--batch-size", str(BATCH), "--val-batch-size", "11", "--seed", "7")
FSDP = ("--parallel", "fsdp")
TRAIN = ("-m", f"{PACKAGE}.train")


@functools.cache
def per_epoch() -> int:
    train_set, _ = task.make_datasets(Config())
    return math.ceil(min(len(train_set), SAMPLES) / BATCH)


def killed_at() -> int:
    """Mid-way through the first epoch, after a checkpoint (every 4 steps) and not at one."""
    return min(6, per_epoch() - 1)


def stopped_at() -> int:
    """Mid-way through the second epoch, not at a checkpoint of its own."""
    step = per_epoch() + per_epoch() // 2
    return step + 1 if step % 4 == 0 else step


def held(root: Path, name: str, step: int, *flags: str):
    """A torchrun launch of 2 ranks, each held after step `step`; (process, the ranks' marker files)."""
    script, marker = root / "held_train.py", root / f"{name}.held"
    script.write_text(held_at_step_code())
    process = start(torchrun(2, str(script), str(step), str(marker), *FLAGS, *flags, "--out", str(root / name)),
                    root / f"{name}.log", env=python_env(PYTHONHASHSEED="7"))
    return process, [marker.with_name(f"{marker.name}.{rank}") for rank in (0, 1)]


def signal_ranks(process, markers: list[Path], signum: int) -> tuple[int, str]:
    """Once every rank is held, sends `signum` to each rank's process; (torchrun's exit status, its stderr)."""
    for rank, marker in enumerate(markers):
        wait_until(marker.exists, process, f"rank {rank} being held")
    for marker in markers:
        os.kill(int(marker.read_text()), signum)
    return process.wait(), process.stderr


def first_round(root: Path) -> dict:
    """Every run at once: FSDP twice with one seed, another seed, DDP with the same seed, two nodes,
    FSDP killed by SIGKILL and FSDP stopped by SIGTERM, DDP stopped as asked."""
    runs = {
        "fsdp": torchrun(2, *TRAIN, *FLAGS, *FSDP), "fsdp_again": torchrun(2, *TRAIN, *FLAGS, *FSDP),
        "fsdp_seed8": torchrun(2, *TRAIN, *FLAGS, *FSDP, "--seed", "8"), "ddp": torchrun(2, *TRAIN, *FLAGS),
        "ddp_stopped": torchrun(2, *TRAIN, *FLAGS, "--stop-after-steps", str(stopped_at())),
    }
    processes = {name: start([*command, "--out", str(root / name)], root / f"{name}.log")
                 for name, command in runs.items()}
    nodes = two_nodes(root, "fsdp_two_nodes", [*TRAIN, *FLAGS, *FSDP])
    killed, stopped = held(root, "fsdp_killed", killed_at(), *FSDP), held(root, "fsdp_stopped", stopped_at(), *FSDP)
    ended = {"fsdp_killed": signal_ranks(*killed, signal.SIGKILL),
             "fsdp_stopped": signal_ranks(*stopped, signal.SIGTERM)}
    for name, process in [*processes.items(), ("fsdp_two_nodes", nodes[0]), ("fsdp_two_nodes", nodes[1])]:
        assert process.wait() == 0, f"{name}:\n{process.stderr[-3000:]}"
    return ended


def second_round(root: Path) -> dict:
    """The stopped runs resumed at once: with their own world size, and with 1 and 3 processes."""
    for source, copies in (("fsdp_stopped", ("fsdp_to1", "fsdp_to3", "fsdp_stopped_as_left")),
                           ("ddp_stopped", ("ddp_to1", "ddp_to1_again", "ddp_to3", "ddp_stopped_as_left"))):
        for copy in copies:
            shutil.copytree(root / source, root / copy)
    resume = ("--resume",)
    commands = {"fsdp_killed": torchrun(2, *TRAIN, *resume), "fsdp_stopped": torchrun(2, *TRAIN, *resume),
                "fsdp_to1": torchrun(1, *TRAIN, *resume), "fsdp_to3": torchrun(3, *TRAIN, *resume),
                "ddp_to1": [sys.executable, *TRAIN, *resume], "ddp_to1_again": [sys.executable, *TRAIN, *resume],
                "ddp_to3": torchrun(3, *TRAIN, *resume)}
    processes = {name: start([*command, "--out", str(root / name)], root / f"{name}-resumed.log")
                 for name, command in commands.items()}
    logs = {}
    for name, process in processes.items():
        assert process.wait() == 0, f"{name} resumed:\n{process.stderr[-3000:]}"
        logs[name] = process.stderr
    return logs


def launch(root: Path) -> dict:
    ended = first_round(root)
    resumed = second_round(root)
    names = ("fsdp", "fsdp_again", "fsdp_seed8", "ddp", "fsdp_two_nodes", *resumed)
    return {"root": root, "runs": {name: read_run(root / name) for name in names}, "ended": ended,
            "resumed": resumed}


@pytest.fixture(scope="module")
def launched_or_failure(tmp_path_factory):
    return once(lambda: launch(tmp_path_factory.mktemp("fsdp")))


@pytest.fixture
def launched(launched_or_failure, request):
    return value_of(launched_or_failure, request)


@pytest.fixture
def runs(launched):
    return launched["runs"]


# ---- FSDP repeats, resumes and stops like DDP -------------------------------------------------

@pytest.mark.distributed
def test_two_fsdp_launches_with_one_seed_give_identical_weights_and_rows(runs):
    first, second = runs["fsdp"], runs["fsdp_again"]
    assert first.config["parallel"] == "fsdp" and first.config["world_size"] == first.summary["world_size"] == 2
    assert first.metrics == second.metrics
    assert first.weights == second.weights


@pytest.mark.distributed
def test_another_seed_under_fsdp_gives_other_weights(runs):
    assert runs["fsdp_seed8"].weights != runs["fsdp"].weights


@pytest.mark.distributed
def test_fsdp_on_two_gloo_ranks_computes_the_bits_of_ddp(runs):
    """Not a promise (--parallel is recorded as a machine setting) but a fact of this stack worth a
    test: with two ranks, an all-reduce and a reduce-scatter add the same two numbers, and halving
    is exact; so FSDP's sharded step, buffers and evaluation are DDP's, bit for bit."""
    assert runs["fsdp"].metrics == runs["ddp"].metrics
    assert runs["fsdp"].weights == runs["ddp"].weights


@pytest.mark.distributed
def test_a_killed_fsdp_run_resumed_has_every_row_and_the_weights_of_the_run_never_stopped(launched, runs):
    returncode, stderr = launched["ended"]["fsdp_killed"]
    assert returncode != 0 and "exitcode  : -9" in stderr  # a real kill, of the training processes
    assert runs["fsdp_killed"].metrics == runs["fsdp"].metrics
    assert runs["fsdp_killed"].weights == runs["fsdp"].weights
    assert "skipping damaged checkpoint" not in launched["resumed"]["fsdp_killed"]


@pytest.mark.distributed
def test_sigterm_stops_every_fsdp_rank_after_the_step_with_all_shards_saved_and_exit_143(launched, runs):
    returncode, stderr = launched["ended"]["fsdp_stopped"]
    step = stopped_at()
    assert returncode != 0 and "exitcode  : 143" in stderr  # torchrun's report: rank 0 exited 143
    assert re.findall(r"exitcode  : (-?\d+)", stderr) and set(re.findall(r"exitcode  : (-?\d+)", stderr)) <= {
        "143", "-15"}  # each rank 143, unless torchrun ended it once the checkpoint was complete
    assert f"SIGTERM: stopped after step {step}, checkpoint " in stderr and "--resume" in stderr
    folder = launched["root"] / "fsdp_stopped_as_left" / "checkpoints" / f"step-{step:08d}"
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "state.pt"} <= {path.name for path in folder.iterdir()}
    assert runs["fsdp_stopped"].metrics == runs["fsdp"].metrics
    assert runs["fsdp_stopped"].weights == runs["fsdp"].weights


@pytest.mark.distributed
def test_two_nodes_of_one_process_under_fsdp_give_the_weights_of_one_node_of_two(runs):
    assert runs["fsdp_two_nodes"].metrics == runs["fsdp"].metrics
    assert runs["fsdp_two_nodes"].weights == runs["fsdp"].weights


# ---- sharded checkpoints, and a model.pt like any other ------------------------------------------

@pytest.mark.distributed
def test_each_fsdp_checkpoint_is_a_complete_folder_of_every_ranks_shards(runs):
    folder = runs["fsdp"].path / "checkpoints"
    steps = sorted(path for path in folder.iterdir())
    assert 0 < len(steps) <= KEEP_LAST and all(path.name.startswith("step-") for path in steps)  # no hidden leftovers
    for path in steps:
        assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "state.pt"} <= {p.name for p in path.iterdir()}
        state = torch.load(path / "state.pt", weights_only=True)
        assert {"scheduler", "epoch", "epoch_step", "step", "config", "optimizer_groups"} <= state.keys()
        assert "model" not in state  # the weights are in the shards only


@pytest.mark.distributed
def test_model_pt_of_an_fsdp_run_is_the_whole_state_dict_of_the_tasks_model(runs):
    config = Config(**runs["fsdp"].config)
    plain = task.make_model(config, task.make_datasets(config)[0]).state_dict()
    weights = torch.load(runs["fsdp"].path / "model.pt", weights_only=True)
    assert list(weights) == list(plain)
    assert all(weights[name].shape == plain[name].shape for name in plain)
    assert state_dict_sha256(weights) == runs["fsdp"].weights


@pytest.mark.distributed
def test_compare_study_and_plot_take_fsdp_runs_like_any_other(runs, tmp_path, capsys):
    assert compare.main([str(runs["fsdp"].path), str(runs["fsdp_again"].path)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    for seed, name in ((7, "fsdp"), (8, "fsdp_seed8")):  # as if trained by a cluster's array job
        shutil.copytree(runs[name].path, tmp_path / "study" / f"seed-{seed}")
    assert study.main(["--seeds", "7,8", "--out", str(tmp_path / "study"), "--summarise"]) == 0
    recorded = json.loads((tmp_path / "study" / "study.json").read_text())
    assert [row["weights_sha256"] for row in recorded["runs"]] == [runs["fsdp"].weights, runs["fsdp_seed8"].weights]
    pytest.importorskip("matplotlib")
    assert plot.main([str(runs["fsdp"].path), "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 0


# ---- another world size on resume ----------------------------------------------------------------

CHANGED = {"ddp_to1": ("ddp", 1), "ddp_to3": ("ddp", 3), "fsdp_to1": ("fsdp", 1), "fsdp_to3": ("fsdp", 3)}


def rows_up_to(run, step: int) -> list[dict]:
    return [row for row in run.metrics if int(row["step"]) <= step]


@pytest.mark.distributed
@pytest.mark.parametrize("name", CHANGED)
def test_a_run_resumed_with_another_world_size_goes_on_from_the_same_step_and_records_it(name, runs, launched):
    reference, world_size = runs[CHANGED[name][0]], CHANGED[name][1]
    run, step = runs[name], stopped_at()
    assert rows_up_to(run, step) == rows_up_to(reference, step)  # what ran before the change is kept
    assert [row["step"] for row in run.metrics] == [row["step"] for row in reference.metrics]  # every step, once
    change = {"step": step, "epoch": 1, "epoch_step": step - per_epoch(), "world_size": world_size}
    assert run.world_sizes == [{"step": 0, "world_size": 2}, change]
    assert run.config["world_size"] == run.summary["world_size"] == 2  # config.json: the world size it started with
    assert f"then {world_size} from step {step}" in launched["resumed"][name]
    assert "another environment" not in launched["resumed"][name]  # said once, as the note above


@pytest.mark.distributed
@pytest.mark.parametrize("name", CHANGED)
def test_a_run_resumed_with_another_world_size_is_not_the_run_that_never_changed(name, runs):
    """Not a guarantee but a fact worth a test: the gradients add up in another order, and each
    rank draws its own dropout masks. benchmarks/resume_gap.py measures how far apart they end."""
    assert runs[name].weights != runs[CHANGED[name][0]].weights


@pytest.mark.distributed
def test_a_run_resumed_with_another_world_size_repeats_bit_for_bit(runs):
    assert runs["ddp_to1"].metrics == runs["ddp_to1_again"].metrics
    assert runs["ddp_to1"].weights == runs["ddp_to1_again"].weights


@pytest.mark.distributed
def test_verify_re_runs_the_world_size_history_and_reproduces_the_run(runs):
    """Two torchrun launches: 2 processes stopped at the change, then 1 (under torchrun: FSDP needs it)."""
    code, lines = verify.verify(runs["fsdp_to1"])
    assert code == 0, lines
    assert f"then 1 from step {stopped_at()}" in lines[0] and lines[-1].startswith("REPRODUCED weights_sha256")


@pytest.mark.distributed
def test_compare_says_where_the_world_size_changed(runs, capsys):
    assert compare.main([str(runs["fsdp"].path), str(runs["fsdp_to3"].path)]) == 1
    out = capsys.readouterr().out
    assert "world size A: 2 processes\n" in out and f"world size B: 2 processes, then 3 from step {stopped_at()}" in out
    assert out.rstrip().endswith("DIFFERENT")


# ---- bad input: one line, exit 2, nothing changed ----------------------------------------------------

def files(folder: Path) -> dict:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture
def as_rank_0_of(monkeypatch):
    """This process as rank 0 of a torchrun launch of N processes, for the checks made before the
    process group is joined (joining would wait for the other ranks: it fails the test instead)."""
    def set_world(world_size: int) -> None:
        for name, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                                MASTER_PORT="1").items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(distributed, "join", lambda device: pytest.fail("not refused before joining"))
    return set_world


def refused(argv: list[str], capsys) -> str:
    """Runs main(argv) in this process, expects exit 2 and one error line after any warnings."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and all(line.startswith("warning: ") for line in lines[:-1]) and "Traceback" not in lines[-1]
    return lines[-1]


def test_fsdp_without_torchrun_is_refused_before_anything_is_written(tmp_path, capsys):
    assert "RANK" not in os.environ  # not under torchrun
    line = refused([*FLAGS, *FSDP, "--out", str(tmp_path / "run")], capsys)
    assert "--parallel fsdp shards the model over processes that torchrun starts" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.distributed
def test_a_world_size_that_cannot_share_the_global_batch_is_refused_new_or_resumed(launched, tmp_path, as_rank_0_of,
                                                                                 capsys):
    as_rank_0_of(5)
    assert "not a multiple of 5 process(es)" in refused([*FLAGS, *FSDP, "--out", str(tmp_path / "new")], capsys)
    assert not (tmp_path / "new").exists()
    stopped = shutil.copytree(launched["root"] / "fsdp_stopped_as_left", tmp_path / "stopped")
    before = files(stopped)
    assert "not a multiple of 5 process(es)" in refused(["--out", str(stopped), "--resume"], capsys)
    assert files(stopped) == before


@pytest.mark.distributed
@pytest.mark.parametrize("source, other", [("ddp_stopped_as_left", "fsdp"), ("fsdp_stopped_as_left", "ddp")])
def test_resuming_with_the_other_parallel_is_refused(source, other, launched, tmp_path, as_rank_0_of, capsys):
    as_rank_0_of(2)
    stopped = shutil.copytree(launched["root"] / source, tmp_path / "stopped")
    before = files(stopped)
    recorded = "ddp" if other == "fsdp" else "fsdp"
    line = refused(["--out", str(stopped), "--resume", "--parallel", other], capsys)
    assert f"parallel (recorded {recorded!r}, given {other!r})" in line
    assert files(stopped) == before


@pytest.mark.distributed
def test_checkpoints_of_the_other_format_than_config_json_says_are_refused(launched, tmp_path, as_rank_0_of, capsys):
    as_rank_0_of(2)
    stopped = shutil.copytree(launched["root"] / "ddp_stopped_as_left", tmp_path / "stopped")
    config = json.loads((stopped / "config.json").read_text())
    (stopped / "config.json").write_text(json.dumps({**config, "parallel": "fsdp"}))  # edited by hand
    before = files(stopped)
    assert "was written by another --parallel than config.json's 'fsdp'" in refused(
        ["--out", str(stopped), "--resume"], capsys)
    assert files(stopped) == before


@pytest.mark.distributed
def test_a_sharded_checkpoint_missing_a_shard_is_skipped_and_with_none_whole_the_resume_is_refused(
        launched, tmp_path, as_rank_0_of, capsys):
    as_rank_0_of(2)
    stopped = shutil.copytree(launched["root"] / "fsdp_stopped_as_left", tmp_path / "stopped")
    checkpoints = sorted((stopped / "checkpoints").iterdir())
    for folder in checkpoints:
        (folder / "__1_0.distcp").unlink()  # as if rank 1 had written to a disk rank 0 cannot see
    before = files(stopped)
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(stopped), "--resume"])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[:-1] == [f"warning: skipping damaged checkpoint {folder} (shard __1_0.distcp is missing)"
                          for folder in reversed(checkpoints)]
    assert f"--resume: all {len(checkpoints)} checkpoints in" in lines[-1] and "are damaged" in lines[-1]
    assert files(stopped) == before




# ---- the pieces, in this process ---------------------------------------------------------------------

def small_state(step: int, seed: int = 0):
    """A TrainingState of a small model with BatchNorm, after one AdamW step (no process group:
    DCP then writes and reads in this one process)."""
    from {{ cookiecutter.project_slug }}.engine.checkpoint import TrainingState
    from {{ cookiecutter.project_slug }}.engine.precision import make_scaler

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return TrainingState(model, optimizer, scheduler, make_scaler("fp32", torch.device("cpu")), step=step)


@pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns that it runs without a process group
def test_a_sharded_checkpoint_reads_back_into_another_model_and_optimizer_exactly(tmp_path):
    saved, fresh = small_state(step=3), small_state(step=0, seed=1)
    path = save_sharded_checkpoint(tmp_path, saved, {"seed": 7}, 1.5)
    state, problem = read_sharded_checkpoint(path)
    assert problem is None and state["config"] == {"seed": 7} and "model" not in state
    fresh.load_checkpoint(state, path)
    assert all(torch.equal(a, b) for a, b in zip(saved.model.state_dict().values(),
                                                 fresh.model.state_dict().values(), strict=True))
    assert str(saved.optimizer.state_dict()) == str(fresh.optimizer.state_dict())
    assert fresh.scheduler.state_dict() == saved.scheduler.state_dict() and fresh.step == 3


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("damage, problem", [
    ("missing", "shard __0_0.distcp is missing"), ("truncated", "shard __0_0.distcp is truncated"),
    ("metadata", "its .metadata is damaged"), ("state", "state.pt: truncated or damaged"),
    ("code", "its .metadata holds objects other than DCP's records, which could run code when loaded")])
def test_a_damaged_sharded_checkpoint_is_named_and_skipped_for_the_one_before(damage, problem, tmp_path, capsys):
    from {{ cookiecutter.project_slug }}.engine.checkpoint import load_latest_checkpoint

    earlier = save_sharded_checkpoint(tmp_path, small_state(step=4), {}, 1.0)
    newest = save_sharded_checkpoint(tmp_path, small_state(step=8), {}, 2.0)
    shard, marker = newest / "__0_0.distcp", tmp_path / "code-ran"
    if damage == "missing":
        shard.unlink()
    elif damage == "truncated":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif damage == "metadata":
        (newest / ".metadata").write_bytes((newest / ".metadata").read_bytes()[:100])
    elif damage == "code":  # a .metadata that would run code when unpickled
        (newest / ".metadata").write_bytes(pickle.dumps(RunsCode(marker)))
    else:
        (newest / "state.pt").write_bytes(b"PK\x03\x04 torn")
    assert load_latest_checkpoint(tmp_path, sharded=True)[1] == earlier
    assert capsys.readouterr().err == f"warning: skipping damaged checkpoint {newest} ({problem})\n"
    assert not marker.exists()


class RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_sharded_save_that_fails_half_way_leaves_no_checkpoint_and_the_earlier_one_whole(tmp_path, monkeypatch):
    import torch.distributed.checkpoint as dcp

    from {{ cookiecutter.project_slug }}.engine.checkpoint import load_latest_checkpoint

    earlier = save_sharded_checkpoint(tmp_path, small_state(step=4), {}, 1.0)
    real_save = dcp.save

    def save_then_die(state_dict, storage_writer):  # as a kill, or a full disk, after the first shard
        real_save(state_dict, storage_writer=storage_writer)
        raise OSError("no space left on device")

    monkeypatch.setattr(dcp, "save", save_then_die)
    with pytest.raises(OSError):
        save_sharded_checkpoint(tmp_path, small_state(step=8), {}, 2.0)
    assert [path.name for path in tmp_path.glob("step-*")] == [earlier.name]
    assert load_latest_checkpoint(tmp_path, sharded=True)[1] == earlier


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_second_sharded_checkpoint_at_one_step_replaces_the_first_whole(tmp_path):
    """At an epoch's last step: the checkpoint before its evaluation, then the one after it."""
    save_sharded_checkpoint(tmp_path, small_state(step=8), {"epoch": "before"}, 1.0)
    path = save_sharded_checkpoint(tmp_path, small_state(step=8, seed=3), {"epoch": "after"}, 2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing hidden left behind
    assert read_sharded_checkpoint(path)[0]["config"] == {"epoch": "after"}


class Loader(list):
    """Batches, as a DataLoader's, with what evaluation_batches reads of one."""

    dataset = {(0, 0): "first sample"}

    def collate_fn(self, samples):
        return ("collated", *samples)


@pytest.mark.parametrize("lengths, counts", [((3, 2), (3, 3)), ((2, 0), (2, 2)), ((1, 1), (1, 1))])
def test_under_fsdp_every_rank_makes_as_many_evaluation_passes_counting_each_batch_once(lengths, counts, monkeypatch):
    monkeypatch.setattr(distributed, "max_over_ranks", lambda number: max(lengths))
    for length, count in zip(lengths, counts, strict=True):
        loader = Loader(f"batch {i}" for i in range(length))
        passes = list(distributed.evaluation_batches(loader, lockstep=True))
        assert len(passes) == count
        assert [batch for batch, counted in passes if counted] == list(loader)
    assert [batch for batch, _ in distributed.evaluation_batches(Loader([]), lockstep=False)] == [
        ("collated", "first sample")]  # no sample at all: one uncounted pass, for the sums' names


def test_which_blocks_fsdp_shards_any_model():
    shared = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10)
    head.weight = shared.weight  # tied: both stay with the root

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = shared, head
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
            self.parts = torch.nn.ModuleDict({"norm": torch.nn.LayerNorm(4), "act": torch.nn.ReLU()})
            self.out = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    model = Model()
    assert distributed.shard_units(model) == [*model.layers, model.parts["norm"], model.out]


def test_the_world_size_history_keeps_what_came_before_the_checkpoint_resumed_from():
    start = [{"step": 0, "world_size": 2}]
    mid = {"step": 13, "epoch": 1, "epoch_step": 4}
    assert history_on_resume([], 2, mid, 2) == []  # the same world size: nothing to record
    changed = history_on_resume([], 2, mid, 3)
    assert changed == [*start, {**mid, "world_size": 3}]
    before_eval, after_eval = {"step": 9, "epoch": 0, "epoch_step": 9}, {"step": 9, "epoch": 1, "epoch_step": 0}
    assert history_on_resume(changed, 2, before_eval, 1) == [*start, {**before_eval, "world_size": 1}]
    assert history_on_resume(changed, 2, after_eval, 2) == []  # back on 2 before the change: as if never
    assert history_on_resume([*start, {**before_eval, "world_size": 1}], 2, after_eval, 3) == [
        *start, {**before_eval, "world_size": 1}, {**after_eval, "world_size": 3}]


def test_a_run_resumed_at_its_stop_step_before_the_evaluation_stops_after_it(tmp_path, capsys):
    """What verify needs to re-run a change of world size made after an epoch's evaluation."""
    flags = [*FLAGS, "--out", str(tmp_path / "run")]
    assert main([*flags, "--stop-after-steps", str(per_epoch())]) == 0  # the epoch's last step, before its evaluation
    assert read_run(tmp_path / "run").metrics[-1]["split"] == "train"
    assert main(["--out", str(tmp_path / "run"), "--resume", "--stop-after-steps", str(per_epoch())]) == 0
    run = read_run(tmp_path / "run")
    assert run.metrics[-1]["split"] == "val" and run.summary is None  # evaluated, then stopped
    assert f"stopped after step {per_epoch()} as asked" in capsys.readouterr().out
    state, _ = read_checkpoint(sorted((tmp_path / "run" / "checkpoints").glob("step-*.pt"))[-1])
    assert (state["step"], state["epoch"], state["epoch_step"]) == (per_epoch(), 1, 0)


# ---- a transformer's layout: tied embeddings, norms at the root --------------------------------

# A task of its own, put in place of task.py's before train runs: a small language model whose
# output layer is its embedding (nanoGPT's `lm_head.weight = wte.weight`), blocks in a ModuleList
# named as the README's fsdp_blocks example names them, and a final norm at the root. FSDP shards
# each block; the embedding, the tied head and the norm belong to the root's unit.
TIED_TASK = """
import torch
import torch.nn.functional as F
from torch import nn
from {package} import task

VOCAB, LENGTH = 11, 8


class Tokens(torch.utils.data.Dataset):
    def __init__(self, seed, count):
        generator = torch.Generator().manual_seed(seed)
        self.rows = torch.randint(VOCAB, (count, LENGTH + 1), generator=generator)
        self.draws_from = ()

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index, :-1], self.rows[index, 1:]


class TiedLanguageModel(nn.Module):
    def __init__(self, width, dropout):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, width)
        self.layers = nn.ModuleList([nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(),
                                                   nn.Dropout(dropout)) for _ in range(2)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens):
        x = self.embedding(tokens)
        for layer in self.layers:
            x = x + layer(x)
        return self.head(self.norm(x))


def make_datasets(config):
    return Tokens(config.data_seed, 100), Tokens(config.data_seed + 1, 34)


def make_model(config, train_set):
    return TiedLanguageModel(config.width, config.dropout)


def fsdp_blocks(model):
    return list(model.layers)


def batch_sums(outputs, targets):
    return dict(loss=F.cross_entropy(outputs.flatten(0, 1), targets.flatten(), reduction="sum"),
                tokens=targets.numel())


def metrics_from_sums(sums):
    return dict(loss=sums["loss"] / sums["tokens"])


task.make_datasets, task.make_model, task.fsdp_blocks = make_datasets, make_model, fsdp_blocks
task.batch_sums, task.metrics_from_sums, task.HEADLINE_METRIC = batch_sums, metrics_from_sums, "loss"
"""
TIED = (*FLAGS, *FSDP, "--epochs", "3")


def tied_launches(root: Path) -> dict:
    """Two launches of the tied model under FSDP, one killed (SIGKILL, in its third epoch: after
    evaluations and the checkpoints that follow them) and resumed at 2, 1 and 3 processes."""
    prelude = TIED_TASK.format(package=PACKAGE)
    script = root / "tied_train.py"
    script.write_text(prelude + f"\nimport sys\nfrom {PACKAGE}.train import main\nsys.exit(main(sys.argv[1:]))\n")
    held_script, marker = root / "tied_held.py", root / "tied_killed.held"
    held_script.write_text(held_at_step_code(prelude))
    env = python_env(PYTHONHASHSEED="7")
    whole = {name: start(torchrun(2, str(script), *TIED, "--out", str(root / name)), root / f"{name}.log", env=env)
             for name in ("tied", "tied_again")}
    killed_step = 2 * math.ceil(100 / BATCH) + 2
    killed = start(torchrun(2, str(held_script), str(killed_step), str(marker), *TIED, "--out", str(root / "killed")),
                   root / "killed.log", env=env)
    # Each rank is killed itself: torchrun starts its ranks in sessions of their own, so a kill of
    # the launcher's group reaches none of them, and each would be told its parent died and stop
    # with a checkpoint (engine/signals.py) while the copies below are made.
    signal_ranks(killed, [marker.with_name(f"{marker.name}.{rank}") for rank in (0, 1)], signal.SIGKILL)
    for name in ("killed_to1", "killed_to3"):
        shutil.copytree(root / "killed", root / name)
    resumed = {name: start(torchrun(processes, str(script), *TIED, "--out", str(root / name), "--resume"),
                           root / f"{name}-resumed.log", env=env)
               for name, processes in (("killed", 2), ("killed_to1", 1), ("killed_to3", 3))}
    for name, process in [*whole.items(), *resumed.items()]:
        assert process.wait() == 0, f"{name}:\n{process.stderr[-3000:]}"
    return {name: read_run(root / name) for name in (*whole, *resumed)}


@pytest.fixture(scope="module")
def tied_or_failure(tmp_path_factory):
    return once(lambda: tied_launches(tmp_path_factory.mktemp("tied")))


@pytest.fixture
def tied(tied_or_failure, request):
    return value_of(tied_or_failure, request)


@pytest.mark.distributed
def test_a_model_with_tied_embeddings_trains_under_fsdp_twice_to_the_same_bits(tied):
    """Its root holds the tied embedding and the final norm: the state after each evaluation is the
    state before it, so every checkpoint after one is written, and the runs repeat."""
    assert tied["tied"].weights == tied["tied_again"].weights
    assert tied["tied"].metrics == tied["tied_again"].metrics
    assert sum(row["split"] == "val" for row in tied["tied"].metrics) == 3


@pytest.mark.distributed
def test_a_tied_model_killed_under_fsdp_and_resumed_is_the_run_that_never_stopped(tied):
    assert tied["killed"].weights == tied["tied"].weights and tied["killed"].metrics == tied["tied"].metrics


@pytest.mark.distributed
@pytest.mark.parametrize("name, processes", [("killed_to1", 1), ("killed_to3", 3)])
def test_a_tied_model_under_fsdp_resumes_at_another_world_size_and_records_it(name, processes, tied):
    run = tied[name]
    assert run.summary is not None and run.world_sizes and run.world_sizes[-1]["world_size"] == processes
