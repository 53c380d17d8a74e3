"""Specifications of --invariant-shards: one run, the same bits on 1, 2 or 4 processes.

Under plain DDP the weights change with the number of processes (the last test of
test_distributed.py, and the negative control below). With --invariant-shards N each batch is cut
into N shards, each a forward and backward pass of its own whichever process holds it, and the
gradients are added in shard order (engine/invariant.py). Then, for this project's task:
1, 2 and 4 processes give the same weights and the same metrics.csv; a run stopped on 2 processes
and resumed on 1 or on 4 equals the run that never stopped; verify re-runs a 4-process run on 1
process, and a run resumed on 4 on 2, and says REPRODUCED; compare calls such runs IDENTICAL; what
the mode cannot do is refused in one line. The runs under torchrun are in the distributed tier
(`pytest -m distributed`); the refusals and the fixed-order sum are in the plain one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from {{ cookiecutter.project_slug }} import DEFAULT_SEED
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.invariant import in_shard_order

from conftest import FAST, PACKAGE, once, python_env, read_run, start, start_module, steps_per_epoch, torchrun, value_of

SHARDS = ("--invariant-shards", "4")
TRAIN = ("-m", f"{PACKAGE}.train", *FAST)


def test_the_shards_gradients_are_added_in_shard_order():
    # float32 values whose sum depends on the order (1e8 + 1 is 1e8): only 0, 1, 2, 3 gives 1.
    rows = [torch.tensor([1e8]), torch.tensor([1.0]), torch.tensor([-1e8]), torch.tensor([1.0])]
    assert in_shard_order(rows, world_size=1).item() == 1.0
    assert torch.stack(rows).flip(0).sum(0).item() != 1.0


@pytest.mark.parametrize(("changes", "says"), [
    ({"invariant_shards": 4, "world_size": 3}, "--invariant-shards 4 is not a multiple of 3 processes"),
    ({"invariant_shards": 4, "batch_size": 18}, "--batch-size 18 is not a multiple of --invariant-shards 4"),
    ({"invariant_shards": 4, "batch_size": 16, "accumulate": 8}, "x --accumulate 8"),
    ({"invariant_shards": 2, "parallel": "fsdp"}, "--invariant-shards is for --parallel ddp"),
    ({"invariant_shards": 2, "precision": "fp16"}, "does not take --precision fp16"),
])
def test_settings_the_mode_cannot_keep_invariant_are_one_sentence(changes, says):
    problem = Config(**changes).problem()
    assert problem is not None and says in problem and "\n" not in problem


@pytest.mark.parametrize(("train_samples", "val_samples", "refused"),
                         [(4, 4, None), (100, 4, None), (3, 4, "training"), (4, 3, "validation")])
def test_the_mode_takes_splits_of_one_sample_a_shard_and_refuses_fewer_naming_the_split(train_samples, val_samples,
                                                                                          refused):
    """Each of the 4 shards must hold a sample: a split of as many samples as shards is taken; one
    sample fewer is refused in one line that names the split (stand-ins for the loaders)."""
    from {{ cookiecutter.project_slug }}.train import invariance_problem

    def loader(samples: int) -> SimpleNamespace:
        return SimpleNamespace(dataset=range(samples))

    problem = invariance_problem(torch.nn.Linear(2, 2), loader(train_samples), loader(val_samples),
                                 SimpleNamespace(invariant_shards=4))
    if refused is None:
        assert problem is None
    else:
        assert f"the {refused} split has 3 samples, fewer than the shards" in problem and "\n" not in problem


def test_verify_takes_a_run_of_the_mode_to_each_world_size_that_divides_its_shards_and_no_other():
    """`verify RUN --world-size N` before anything is re-run: a run of --invariant-shards 4 made on 4
    processes goes to 1, 2 or 4, and 3 or 8 get one line; a plain DDP run only to its own size. (The
    re-runs themselves are in the distributed tier, below.)"""
    from {{ cookiecutter.project_slug }}.engine.runs import Run
    from {{ cookiecutter.project_slug }}.verify import world_size_problem

    def run_of(**changes) -> Run:
        return Run(Path("run"), Config(**changes).to_dict(), {}, [], (), None)

    sharded, plain = run_of(invariant_shards=4, world_size=4), run_of(world_size=2)
    assert [size for size in range(1, 9) if world_size_problem(sharded, size) is None] == [1, 2, 4]
    assert [size for size in range(1, 9) if world_size_problem(plain, size) is None] == [2]
    problem = world_size_problem(sharded, 3)
    assert "--world-size 3 does not divide the run's --invariant-shards 4" in problem and "\n" not in problem


@pytest.mark.parametrize("typed", ["0", "-1", "two", "\u0662"])
def test_verify_world_size_takes_a_whole_number_of_processes_of_at_least_one(typed):
    """--world-size 0 would reach `invariant_shards % 0` (a ZeroDivisionError traceback): the parser
    refuses it, and what is no number, in its one line; 1 is taken."""
    from {{ cookiecutter.project_slug }}.verify import processes

    with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
        processes(typed)
    assert processes("1") == 1


def test_verify_of_a_run_of_the_mode_on_another_world_size_stops_its_one_launch_at_steps(monkeypatch):
    """`verify RUN --steps 3 --world-size 2` re-runs only the first 3 steps, in its one launch on 2
    processes, and without --steps the whole run: a stand-in for the launch records what it was
    asked, and fails, so that nothing trains here (the launches themselves: the distributed tier)."""
    from {{ cookiecutter.project_slug }} import verify as verify_module
    from {{ cookiecutter.project_slug }}.engine.runs import Run

    class Failed:
        returncode = 1

        def communicate(self) -> tuple[str, str]:
            return "", "stopped here by the test"

    asked = []
    monkeypatch.setattr(verify_module, "launch_training",
                        lambda *args, world_size, torchrun: asked.append((world_size, list(args))) or Failed())
    original = Run(Path("run"), Config(invariant_shards=4, world_size=4).to_dict(), {}, [], (), None)
    for steps, flags in ((3, ["--stop-after-steps", "3"]), (None, [])):
        asked.clear()
        code, lines = verify_module.verify(original, steps=steps, world_size=2)
        assert code == 2 and lines[-1] == "cannot verify: the re-run failed: stopped here by the test"
        assert len(asked) == 1 and asked[0][0] == 2
        args = asked[0][1]
        assert args[args.index("--out") + 2:] == flags, args


def test_verify_stops_at_each_change_and_after_the_evaluation_when_the_change_came_after_it():
    """How verify re-runs a run resumed on other numbers of processes (world_sizes.json's history):
    a launch on each world size, stopped where the run changed size; where the change came at an
    epoch's start, the epoch's evaluation ran on the size before it, so a second launch on that size
    makes it there. The steps are computed here from the history. (A run that never changed size is
    one launch; the launches themselves, under torchrun, are in the distributed tier.)"""
    from {{ cookiecutter.project_slug }}.verify import launches

    history = [{"step": 0, "world_size": 2}, {"step": 13, "epoch": 1, "epoch_step": 4, "world_size": 3},
               {"step": 18, "epoch": 2, "epoch_step": 0, "world_size": 1}]
    stop = "--stop-after-steps"
    assert launches([], 2, None) == [(2, [])]
    assert launches(history, 2, None) == [(2, [stop, "13"]), (3, [stop, "18"]), (3, [stop, "18"]), (1, [])]
    assert launches(history, 2, 10) == [(2, [stop, "10"])]
    assert launches(history, 2, 15) == [(2, [stop, "13"]), (3, [stop, "15"])]
    at_an_epochs_start = [{"step": 0, "world_size": 4}, {"step": 8, "epoch": 1, "epoch_step": 0, "world_size": 2}]
    assert launches(at_an_epochs_start, 4, None) == [(4, [stop, "8"]), (4, [stop, "8"]), (2, [])]


# The task's model, held beside a SyncBatchNorm that its forward pass does not use (a Sequential's
# own attribute would join its chain).
SYNC_BATCHNORM = """
import sys
from torch import nn
from {package} import task, train


class WithSyncBatchNorm(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.synced = model, nn.SyncBatchNorm(4)

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)


make_model = task.make_model
task.make_model = lambda config, train_set: WithSyncBatchNorm(make_model(config, train_set))
sys.exit(train.main(sys.argv[1:]))
"""


def test_a_model_with_sync_batchnorm_is_refused_in_one_line_before_anything_is_written(tmp_path):
    code = SYNC_BATCHNORM.format(package=PACKAGE)
    process = start([sys.executable, "-c", code, *FAST, *SHARDS, "--out", str(tmp_path / "run")], tmp_path / "run.log",
                    env=python_env(PYTHONHASHSEED=str(DEFAULT_SEED)))
    assert process.wait() == 2
    assert process.stderr.strip().count("\n") == 0 and "SyncBatchNorm" in process.stderr, process.stderr
    assert not (tmp_path / "run" / "metrics.csv").exists()


def launch(root):
    """The runs, each in fresh processes, started at once: --invariant-shards 4 on 1, 2 and 4
    processes; one on 2 stopped mid-epoch, then resumed on 1 and on 4; plain DDP on 1 and 2 (the
    negative control); a launch on 3 processes (refused)."""
    stop = steps_per_epoch() // 2 + 1
    commands = {
        "one": [sys.executable, *TRAIN, *SHARDS],
        "two": torchrun(2, *TRAIN, *SHARDS),
        "four": torchrun(4, *TRAIN, *SHARDS),
        "stopped": torchrun(2, *TRAIN, *SHARDS, "--stop-after-steps", str(stop)),
        "plain_one": [sys.executable, *TRAIN],
        "plain_two": torchrun(2, *TRAIN),
        "three": torchrun(3, *TRAIN, *SHARDS),
    }
    processes = {name: start([*command, "--out", str(root / name)], root / f"{name}.log")
                 for name, command in commands.items()}
    codes = {name: process.wait() for name, process in processes.items()}
    for name, code in codes.items():
        assert code == 0 or name == "three", f"{name}:\n{processes[name].stderr[-3000:]}"
    for name in ("to_one", "to_four"):
        shutil.copytree(root / "stopped", root / name)
    resumed = {"to_one": start([sys.executable, "-m", f"{PACKAGE}.train", "--out", str(root / "to_one"), "--resume"],
                               root / "to_one.log"),
               "to_four": start(torchrun(4, "-m", f"{PACKAGE}.train", "--out", str(root / "to_four"), "--resume"),
                                root / "to_four.log")}
    for name, process in resumed.items():
        assert process.wait() == 0, f"{name}:\n{process.stderr[-3000:]}"
    verified = {name: start_module("verify", str(root / name), "--world-size", size, log=root / f"verify-{name}.log")
                for name, size in (("four", "1"), ("to_four", "2"), ("plain_two", "1"))}
    evaluated = start_module("evaluate", str(root / "four"), "--json", str(root / "evaluated.json"),
                             log=root / "evaluate-four.log")
    compared = {(a, b): start_module("compare", str(root / a), str(root / b), log=root / f"compare-{a}-{b}.log")
                for a, b in (("one", "four"), ("one", "to_four"), ("plain_one", "plain_two"))}
    runs = {name: read_run(root / name) for name in ("one", "two", "four", "to_one", "to_four", "plain_one",
                                                     "plain_two")}
    return {"runs": runs, "three": (codes["three"], processes["three"].stderr, root / "three"),
            "resumed": {name: process.stderr for name, process in resumed.items()},
            "verified": {name: (process.wait(), process.stdout, process.stderr) for name, process in verified.items()},
            "compared": {pair: (process.wait(), process.stdout) for pair, process in compared.items()},
            "evaluated": (evaluated.wait(), root / "evaluated.json", evaluated.stderr)}


@pytest.fixture(scope="module")
def launched_or_failure(tmp_path_factory):
    return once(lambda: launch(tmp_path_factory.mktemp("world_sizes")))


@pytest.fixture
def launched(launched_or_failure, request):
    return value_of(launched_or_failure, request)


@pytest.mark.distributed
def test_one_two_and_four_processes_give_the_same_weights_and_the_same_metrics(launched):
    one, two, four = (launched["runs"][name] for name in ("one", "two", "four"))
    assert (one.config["world_size"], two.config["world_size"], four.config["world_size"]) == (1, 2, 4)
    assert one.weights == two.weights == four.weights
    assert one.metrics == two.metrics == four.metrics  # every step's loss and every evaluation, bit for bit


@pytest.mark.distributed
def test_plain_ddp_gives_other_weights_on_another_number_of_processes(launched):
    """The negative control: without the mode, the same run on 1 and 2 processes parts."""
    runs = launched["runs"]
    assert runs["plain_one"].weights != runs["plain_two"].weights
    assert runs["plain_two"].weights != runs["two"].weights  # and the mode is not plain DDP's result


@pytest.mark.distributed
def test_a_run_stopped_on_two_processes_resumes_on_one_or_four_to_the_run_that_never_stopped(launched):
    runs = launched["runs"]
    for name, size in (("to_one", 1), ("to_four", 4)):
        assert runs[name].world_sizes[-1]["world_size"] == size  # world_sizes.json records the change
        assert runs[name].metrics == runs["two"].metrics, name
        assert runs[name].weights == runs["two"].weights, name
        assert "with --invariant-shards it stays, bit for bit, the run that never changed" in launched["resumed"][name]


@pytest.mark.distributed
def test_verify_reruns_a_run_on_fewer_processes_than_it_used_and_reproduces_it(launched):
    for name in ("four", "to_four"):
        code, stdout, stderr = launched["verified"][name]
        assert code == 0, f"{name}:\n{stdout}\n{stderr}"
        assert f"REPRODUCED weights_sha256 {launched['runs'][name].weights}" in stdout


@pytest.mark.distributed
def test_evaluate_in_one_process_gives_exactly_a_four_process_runs_own_figures(launched):
    code, result, stderr = launched["evaluated"]
    assert code == 0, stderr
    summary, figures = launched["runs"]["four"].summary, json.loads(result.read_text())["figures"]
    assert figures == {name: summary[f"val_{name}"] for name in figures}
    assert "note:" not in stderr  # no "the last bits may differ": the shards' sums add up alike


@pytest.mark.distributed
def test_compare_calls_runs_of_the_mode_on_other_numbers_of_processes_identical_and_plain_ddps_different(launched):
    for pair in (("one", "four"), ("one", "to_four")):
        code, stdout = launched["compared"][pair]
        assert (code, stdout.strip().splitlines()[-1]) == (0, "IDENTICAL"), stdout
    code, stdout = launched["compared"][("plain_one", "plain_two")]
    assert (code, stdout.strip().splitlines()[-1]) == (1, "DIFFERENT"), stdout


@pytest.mark.distributed
def test_what_the_mode_cannot_keep_invariant_is_refused_in_one_line(launched):
    code, stderr, folder = launched["three"]
    assert code != 0 and "--invariant-shards 4 is not a multiple of 3 processes" in stderr
    assert not (folder / "metrics.csv").exists()
    code, stdout, stderr = launched["verified"]["plain_two"]  # a plain DDP run: its bits depend on the world size
    assert code == 2 and "without --invariant-shards" in stderr and stderr.strip().count("\n") == 0, stderr
