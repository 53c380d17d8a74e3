"""What a run writes (its settings, what was in effect, every step's figures, the weights and their
hash: tests/test_two_runs_match.py checks the figures' bits, the hash seed and the threads), and a
mistake on the command line, refused before anything is written."""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from {{ cookiecutter.project_slug }} import task, train
from {{ cookiecutter.project_slug }}.config import FLOAT32_MAX, MAX_THREADS, MAX_WORKERS, parse_flags
from {{ cookiecutter.project_slug }}.config import settings as settings_of
from {{ cookiecutter.project_slug }}.train import first, main
from {{ cookiecutter.project_slug }}.utils.data import make_loader
from {{ cookiecutter.project_slug }}.utils.device import select_device
from {{ cookiecutter.project_slug }}.utils.repro import seed_step, state_dict_sha256

from conftest import FAST, HANG, PACKAGE, Run, finish, python_env, settings, start, wait_for

# Not a multiple of FAST's batch of 16: each epoch ends on a short step, the case a loader that
# drops it, or a step count rounded down, gets wrong; and fewer than the validation split holds.
UNEVEN = 120


@pytest.fixture(scope="module")
def started(tmp_path_factory) -> Iterator[dict[str, tuple[subprocess.Popen, Path]]]:
    """This module's fresh runs, name -> (process, log), all started at once, so that two cores
    train while pytest waits; each test waits for the one it reads:
    - run: the run most tests read (--seed 3, UNEVEN samples);
    - readme: the README's first run, into runs/a of a folder that has no runs/, on --device auto;
    - restarted: a run launched from a shell with another hash seed, its imports logged on stderr,
      as `python -mPACKAGE.train`: the joined spelling, which some launchers write (the others
      are launched as `python -m PACKAGE.train`)."""
    root = tmp_path_factory.mktemp("run_folder")
    train = ["-m", f"{PACKAGE}.train"]
    commands = {
        "run": ([*train, "--out", str(root / "run"), *FAST, "--seed", "3", "--max-samples", str(UNEVEN)], None),
        "readme": ([*train, "--out", str(root / "fresh" / "runs" / "a"), *FAST, "--device", "auto"], None),
        "restarted": (["-X", "importtime", f"-m{PACKAGE}.train", "--seed", "0", "--out", str(root / "restarted"),
                       *FAST],
                      python_env(PYTHONHASHSEED="5")),
    }
    processes = {name: (start(args, root / name, env), root / name) for name, (args, env) in commands.items()}
    yield processes
    for process, _ in processes.values():  # one whose test was not selected: stopped, with its workers
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="module")
def run(started) -> Run:
    finish(*started["run"])
    return Run(started["run"][1])


def test_a_run_folder_holds_its_config_environment_metrics_checkpoint_model_and_summary(run):
    assert sorted(path.name for path in run.path.iterdir()) == [
        "checkpoint.pt", "config.json", "environment.json", "metrics.csv", "model.pt", "summary.json"]
    assert run.config["seed"] == 3 and run.config["epochs"] == 2
    assert run.summary["seed"] == 3  # the seed its weights come from (--data-seed kept the bake's default)
    assert [row["step"] for row in run.metrics if row["split"] == "train"] == [
        str(step) for step in range(1, run.summary["steps"] + 1)]
    assert sum(row["split"] == "val" for row in run.metrics) == run.config["epochs"]


def test_each_epoch_trains_on_every_sample_its_short_last_step_included_each_step_numbered_once(run):
    """120 samples in batches of 16: 8 steps an epoch, the last of 8 samples (a loader that drops
    it trains 7), numbered on from the epoch before (a count rounded down numbers a step twice)."""
    samples = min(UNEVEN, len(task.make_datasets(settings(**run.config))[0]))  # a task's smaller set: all of it
    steps = run.config["epochs"] * math.ceil(samples / run.config["batch_size"])
    assert run.summary["steps"] == steps
    assert [int(row["step"]) for row in run.metrics if row["split"] == "train"] == list(range(1, steps + 1))


def test_the_summarys_figures_are_the_final_models_on_the_first_max_samples_of_the_validation_split(run):
    """An oracle computed here, in one forward pass: model.pt over the first --max-samples samples of
    the validation split gives summary.json's figures. The whole split (where it holds more), or the
    training split, would give others."""
    config = settings(**{**run.config, "out": run.path})
    train_set, val_set = task.make_datasets(config)
    model = task.make_model(config, train_set)
    model.load_state_dict(torch.load(run.path / "model.pt", weights_only=True))
    model.eval()
    inputs, targets = next(iter(make_loader(first(val_set, UNEVEN), UNEVEN, config.seed, train=False)))
    with torch.no_grad():
        figures = {name: float(value) for name, value in task.metrics_from_sums(task.batch_sums(model(inputs),
                                                                                              targets)).items()}
    assert figures == pytest.approx({name: run.summary[f"val_{name}"] for name in figures}, rel=1e-5, abs=1e-7)


def test_without_out_a_run_goes_into_runs_seed_and_the_seed_it_trains_with():
    """The README's default folder, runs/seed<SEED>: two seeds, two folders, whatever the data seed."""
    assert parse_flags(["--seed", "5"]).out == Path("runs", "seed5")
    if hasattr(settings(), "data_seed"):  # a project with a fixed split may have taken --data-seed out
        assert parse_flags(["--seed", "5", "--data-seed", "6"]).out == Path("runs", "seed5")
    assert parse_flags(["--out", "elsewhere", "--seed", "5"]).out == Path("elsewhere")


def test_model_pt_loads_into_a_fresh_model_and_has_the_recorded_weights_hash(run):
    weights = torch.load(run.path / "model.pt", weights_only=True)
    config = settings()
    task.make_model(config, task.make_datasets(config)[0]).load_state_dict(weights, strict=True)
    assert state_dict_sha256(weights) == run.weights


BAD = {
    "negative seed": ("--seed", "-1"),
    "seed above 2**32-1": ("--seed", "4294967296"),
    "data seed above 2**32-1": ("--data-seed", "4294967296"),
    "zero epochs": ("--epochs", "0"),
    "learning rate not a number": ("--lr", "fast"),
    "learning rate below 0": ("--lr", "-1"),
    "learning rate of 0 (no step would change a weight)": ("--lr", "0"),
    "learning rate NaN": ("--lr", "nan"),
    "learning rate infinite": ("--lr", "inf"),
    "learning rate beyond float32 (the weights' type)": ("--lr", "1e39"),
    "dropout above 1": ("--dropout", "1.5"),
    "dropout of 1 (every unit dropped)": ("--dropout", "1"),
    "negative momentum": ("--momentum", "-1"),
    "momentum of 1 (no decay)": ("--momentum", "1"),
    "dropout NaN (fails every comparison)": ("--dropout", "nan"),
    "momentum NaN": ("--momentum", "nan"),
    "seed in Arabic-Indic digits": ("--seed", "\u0664\u0662"),
    "an abbreviated flag (the restart reads --seed whole)": ("--se", "3"),
    "comma-separated GPUs": ("--device", "cuda:1,2"),
    "unknown determinism mode": ("--deterministic", "sometimes"),
    "resume without a checkpoint": ("--resume",),
    "empty out (an unset shell variable)": ("--out", ""),
    "out of blanks (a variable that holds a space)": ("--out", " "),
    "threads beyond any machine": ("--threads", "10000"),
    "batch size beyond 2**63 - 1": ("--batch-size", "100000000000000000000"),
}


@pytest.mark.parametrize("flags", BAD.values(), ids=BAD.keys())
def test_a_mistake_gets_one_line_and_exit_2_and_writes_nothing(flags, tmp_path, monkeypatch, capsys):
    """Through command_line(), what `python -m ...train` runs: the lines it has for Ctrl-C and a
    failing disk take no refusal for one of theirs. Run in an empty folder, which stays empty."""
    monkeypatch.chdir(tmp_path)  # where a relative --out, taken by mistake, would write
    monkeypatch.setattr(sys, "argv", ["train", "--out", str(tmp_path / "never"), *FAST, *flags])
    with pytest.raises(SystemExit) as exit_info:
        train.command_line()
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.startswith(f"python -m {PACKAGE}.train: error: "), error
    assert not list(tmp_path.iterdir())


# The edges of each range, which a refusal above must not take: 0 is a dropout and a momentum (plain
# SGD), 2**32 - 1 a seed and a data seed (PYTHONHASHSEED's largest), the largest --lr a float32
# holds, and as many threads and workers as the bounds allow.
EDGES = [("--seed", "0", 0), ("--seed", "4294967295", 4294967295), ("--data-seed", "4294967295", 4294967295),
         ("--epochs", "1", 1), ("--lr", "3.4028234663852886e38", FLOAT32_MAX), ("--dropout", "0", 0.0),
         ("--momentum", "0", 0.0), ("--max-samples", "0", 0), ("--threads", str(MAX_THREADS), MAX_THREADS),
         ("--num-workers", str(MAX_WORKERS), MAX_WORKERS)]


@pytest.mark.parametrize(("flag", "typed", "value"), EDGES, ids=[f"{flag} {typed}" for flag, typed, _ in EDGES])
def test_the_edges_of_each_range_are_accepted_as_typed(flag, typed, value):
    name = flag[2:].replace("-", "_")
    if not hasattr(parse_flags([]), name):
        pytest.skip(f"this project's train.py has no {flag}")
    assert getattr(parse_flags([flag, typed]), name) == value


def test_the_readmes_first_run_makes_its_folder_with_the_folders_above_and_records_the_device_it_used(started):
    """`--out runs/a` in a fresh project: runs/ is made too. --device auto is recorded as asked in
    config.json, and environment.json holds the device the run trained on, which explains two
    hashes that differ between a GPU and a CPU."""
    process, log = started["readme"]
    finish(process, log)
    made = Run(Path(process.args[process.args.index("--out") + 1]))  # the folder its command line named
    assert made.config["device"] == "auto"
    assert made.environment["device"] == str(select_device("auto"))


@pytest.mark.parametrize(("flags", "said"), [
    (("--batch-size", str(2**63)), f"'{2**63}' is not an integer in 1 .. {2**63 - 1}"),
    (("--batch-size", "0"), "'0' is not an integer of at least 1"),
    (("--seed", str(2**32)), f"'{2**32}' is not an integer in 0 .. {2**32 - 1}"),
    (("--epochs", "three"), "'three' is not an integer of at least 1"),
], ids=["too large: both bounds", "too small: the lower one", "a bounded flag: both", "no integer"])
def test_a_refused_integer_is_told_the_bounds_it_missed(flags, said, capsys):
    """A number too large is told there is an upper bound and what it is, not only that it must be
    at least 1, which it is."""
    with pytest.raises(SystemExit) as exit_info:
        parse_flags(list(flags))
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip().endswith(said)


@pytest.mark.parametrize("typed, said", [
    ("gpu", "argument --device: 'gpu' is not one of auto, cpu, cuda, cuda:N, mps"),
    ("cuda:0,1", "argument --device: 'cuda:0,1' is not one of auto, cpu, cuda, cuda:N, mps (one process uses one "
                 "GPU; for several, launch with torchrun)")])
def test_a_device_that_is_no_device_name_is_told_the_names_there_are_and_what_several_gpus_take(typed, said, capsys):
    """Not argparse's bare "invalid device value": the names, and the myth of model.cuda('cuda:0,1')."""
    with pytest.raises(SystemExit) as exit_info:
        parse_flags(["--device", typed])
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip().endswith(said)


def test_a_run_without_deterministic_takes_the_mode_the_project_was_made_with():
    """The default its README names (chosen when the project was made). Another default changes no
    hash on a CPU, where every mode repeats: only this says so."""
    assert parse_flags([]).deterministic == {{ cookiecutter.determinism|tojson }}


def test_a_worker_count_no_machine_runs_is_refused_before_any_worker_starts(capsys):
    """Each worker is a process: 100000 kept starting processes until a two-core machine stalled. The
    flags alone, so that a bound that breaks fails here rather than starting them."""
    with pytest.raises(SystemExit) as exit_info:
        parse_flags(["--num-workers", "100000"])
    assert exit_info.value.code == 2 and "'100000' is not an integer in 0 .. " in capsys.readouterr().err


def test_a_folder_that_holds_a_run_is_refused_and_left_as_it_was(run, capsys):
    before = {path: path.read_bytes() for path in run.path.iterdir()}
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(run.path), *FAST])
    assert exit_info.value.code == 2 and "--resume" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in run.path.iterdir()} == before


def test_a_run_prints_no_warning(run):
    """float() of a loss that still requires grad warns in torch; the run takes its value detached."""
    assert run.path.with_suffix(".err").read_text(encoding="utf-8").strip() == ""


def test_the_restart_for_the_hash_seed_comes_before_torch_is_imported(started):
    """A run launched with another PYTHONHASHSEED starts again with its own (__init__.py), before
    torch's import: torch, the slow part of a start, loads once, in the process that trains. -X
    importtime logs every import of both interpreters on stderr (the restart keeps the options).
    Launched as `python -mPACKAGE.train`, the spelling that the other runs do not use, with seed 0,
    the one seed that a test of the seed's truth (`if seed:`, for `is not None`) would not restart."""
    process, log = started["restarted"]
    finish(process, log)
    imported = [line.rsplit("|", 1)[-1].strip() for line in log.with_suffix(".err").read_text().splitlines()
                if line.startswith("import time:")]
    assert imported.count(f"{PACKAGE}.utils.hashseed") == 2, "no restart: the shell's hash seed was left in effect"
    assert imported.count("torch") == 1, "torch was imported before the restart, and once more after it"
    assert Run(log).environment["python_hash_seed"] == "0"


def test_the_restart_takes_the_seed_the_run_trains_with(run):
    """__init__.py reads --seed without argparse, before torch: for each command line, the seed that
    train.py's own parser then takes (the last --seed typed; with --resume, the recorded one)."""
    from {{ cookiecutter.project_slug }} import seed_from_command_line

    for argv in (["--seed", "3", "--seed", "5"], ["--seed=3", "--seed", "5"], ["--seed", "5", "--seed=9"],
                 ["--out", "x", "--seed", "8"], ["--lr", "0.1"], ["--seed", "4294967295"]):
        assert seed_from_command_line(argv) == parse_flags(argv).seed, argv
    for argv in (["--seed", "-1"], ["--seed", "4294967296"], ["--seed", "\u0664\u0662"], ["--seed"]):
        assert seed_from_command_line(argv) is None, argv  # train.py refuses it, in its own words
    resumed = ["--out", str(run.path), "--resume"]
    assert seed_from_command_line(resumed) == settings_of(resumed).seed == 3


@pytest.mark.parametrize("recorded", [None, '{"lr": 0.05}', "[3]", "null", '"seed 3"', "{not json", b"\xff\xfe"],
                         ids=["no file", "no seed", "a list", "null", "a string", "not JSON", "not UTF-8"])
def test_a_run_folder_the_restart_cannot_read_leaves_the_default_seed_for_train_to_refuse(recorded, tmp_path, capsys):
    """A missing, hand-edited or clobbered config.json: the seed read before torch is the default,
    with no traceback from __init__.py, and train.py's own settings refuse the folder in one line."""
    from {{ cookiecutter.project_slug }} import seed_from_command_line

    if isinstance(recorded, bytes):
        (tmp_path / "config.json").write_bytes(recorded)
    elif recorded is not None:
        (tmp_path / "config.json").write_text(recorded, encoding="utf-8")
    resumed = ["--out", str(tmp_path), "--resume"]
    assert seed_from_command_line(resumed) == parse_flags([]).seed
    with pytest.raises(SystemExit) as exit_info:
        settings_of(resumed)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(error.strip().splitlines()) == 1 and "--resume" in error, error


def test_resuming_says_after_which_epoch_counted_from_1_as_the_run_printed_it(run, tmp_path, capsys):
    """The run printed "epoch 1/2" and "epoch 2/2": its checkpoint, written after the second, is
    resumed "after epoch 2", the count of validation rows it kept (the oracle), not one fewer."""
    copy = shutil.copytree(run.path, tmp_path / "run")
    config = settings_of(["--out", str(copy), "--resume"])
    model = task.make_model(config, task.make_datasets(config)[0])
    start, rows = train.load_checkpoint(copy / "checkpoint.pt", model, torch.optim.SGD(model.parameters(), lr=0.1))
    finished = sum(row["split"] == "val" for row in run.metrics)
    assert (start, rows) == (finished, len(run.metrics))
    assert capsys.readouterr().out == f"resuming {copy} after epoch {finished}\n"


def test_resume_trains_with_the_worker_count_typed_not_the_recorded_one(run):
    """--num-workers alone may differ on --resume, since it changes no result (test_workers.py):
    a run started with 8 workers is resumed on a 2-core laptop with the count typed there."""
    typed = 1 if run.config["num_workers"] != 1 else 2
    assert settings_of(["--out", str(run.path), "--resume", "--num-workers", str(typed)]).num_workers == typed


def test_a_run_that_started_in_the_folder_meanwhile_is_refused_after_the_lock_and_left_as_it_was(
        run, tmp_path, capsys):
    """The settings refuse a folder that holds a run, but another run may start there between that
    check and the lock: open_run_folder looks again once it holds the lock, and refuses without
    writing or removing anything (the other run's metrics.csv is what its --resume needs)."""
    out = tmp_path / "raced"
    config = settings_of(["--out", str(out), *FAST])  # the folder is free when the flags are read
    shutil.copytree(run.path, out)  # then a run is there, as another process would have started it
    before = {path: path.read_bytes() for path in out.iterdir()}
    model = torch.nn.Linear(2, 2)
    with pytest.raises(SystemExit) as exit_info:
        train.open_run_folder(config, model, torch.optim.SGD(model.parameters(), lr=0.1), torch.device("cpu"))
    assert exit_info.value.code == 2 and "already holds a run" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in out.iterdir()} == before


def test_a_device_is_one_setting_however_it_is_spelled(run, tmp_path):
    """' CPU' and 'cpu' name one device: the settings hold it as device_name spells it (what
    config.json records), and --resume takes any spelling of the recorded one; before, --device CPU
    was recorded as typed, and --resume --device cpu of that run was refused as another setting."""
    assert settings_of(["--out", str(tmp_path / "new"), "--device", " CPU"]).device == "cpu"
    assert run.config["device"] == "cpu"  # FAST's
    assert settings_of(["--out", str(run.path), "--resume", "--device", "CPU "]).device == "cpu"


# Each setting a run records, typed on --resume with another value than the run's (the first of two
# that differs from it: the defaults are the bake's): only --num-workers, which changes no result,
# may differ on --resume.
OTHER_VALUES = {"seed": ("4", "5"), "data_seed": ("4", "5"), "epochs": ("3", "4"), "batch_size": ("8", "4"),
                "lr": ("0.01", "0.02"), "momentum": ("0.5", "0.6"), "width": ("8", "4"), "dropout": ("0.5", "0.4"),
                "max_samples": ("64", "32"), "threads": ("2", "3"), "device": ("auto", "cpu"),
                "deterministic": ("warn", "off")}


@pytest.mark.parametrize("name", OTHER_VALUES)
def test_resume_refuses_a_setting_other_than_the_recorded_one_and_leaves_the_run_as_it_was(name, run, capsys):
    if name not in run.config:
        pytest.skip(f"this project's train.py has no --{name.replace('_', '-')}")
    other = next(value for value in OTHER_VALUES[name] if value != str(run.config[name]))
    flag = f"--{name.replace('_', '-')} {other}"
    before = {path: path.read_bytes() for path in run.path.iterdir()}
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(run.path), "--resume", *flag.split()])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(error.strip().splitlines()) == 1 and flag in error, error
    assert {path: path.read_bytes() for path in run.path.iterdir()} == before


# Each setting a result depends on, with values other than the bake's defaults: a run with one of
# them ends with other weights than the same run without it. A flag that no code reads changes
# nothing, and two runs of it still agree; config.json records it all the same. A flag that
# config.py no longer has (a task without dropout, a fixed split) is passed over.
CHANGES_THE_WEIGHTS = {"seed": ("4", "5"), "data_seed": ("4", "5"), "epochs": ("2",), "batch_size": ("8",),
                       "lr": ("0.01", "0.02"), "momentum": ("0.5", "0.6"), "width": ("8", "4"),
                       "dropout": ("0.5", "0.4"), "max_samples": ("16",)}
SMALL = ("--epochs", "1", "--device", "cpu", "--max-samples", "32", "--batch-size", "16")  # two steps


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Run:
    folder = tmp_path_factory.mktemp("small") / "run"
    assert main(["--out", str(folder), *SMALL]) == 0
    return Run(folder)


@pytest.mark.parametrize("name", CHANGES_THE_WEIGHTS)
def test_each_setting_that_a_result_depends_on_changes_the_weights(name, small_run, tmp_path):
    if name not in small_run.config:
        pytest.skip(f"this project's train.py has no --{name.replace('_', '-')}")
    other = next(value for value in CHANGES_THE_WEIGHTS[name] if value != str(small_run.config[name]))
    flag = f"--{name.replace('_', '-')}"
    assert main(["--out", str(tmp_path / "other"), *SMALL, flag, other]) == 0
    changed = Run(tmp_path / "other")
    assert str(changed.config[name]) == other
    assert changed.weights != small_run.weights, (
        f"{flag} {other} trained the weights of {small_run.config[name]}: if task.py ignores config.{name}, read it "
        f"there, or take {flag} out of config.py (README: Bring your own task)")


@pytest.mark.parametrize(("mode", "algorithms", "warn_only"),
                         [("strict", True, False), ("warn", True, True), ("off", False, False)])
def test_the_determinism_mode_typed_is_the_one_in_effect_as_the_run_trains(mode, algorithms, warn_only, tmp_path):
    """environment.json records what was in effect once the run had set it up: --deterministic acts."""
    assert main(["--out", str(tmp_path / "run"), *SMALL, "--deterministic", mode]) == 0
    recorded = Run(tmp_path / "run").environment["determinism"]
    assert (recorded["deterministic_algorithms"], recorded["deterministic_warn_only"]) == (algorithms, warn_only)
    assert recorded["cudnn_deterministic"] == algorithms


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_the_start_with_its_settings(run, tmp_path):
    """What a stop in epoch 1 leaves: config.json, environment.json and some rows, no checkpoint.
    --resume trains it from the start with the recorded settings, to the uninterrupted run's bits."""
    stopped = tmp_path / "stopped"
    shutil.copytree(run.path, stopped)
    for name in ("checkpoint.pt", "model.pt", "summary.json"):
        (stopped / name).unlink()
    metrics = (stopped / "metrics.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (stopped / "metrics.csv").write_text("".join(metrics[:4]), encoding="utf-8")
    finish(start(["-m", f"{PACKAGE}.train", "--out", str(stopped), "--resume"], tmp_path / "resumed"),
           tmp_path / "resumed")
    assert Run(stopped).weights == run.weights
    assert (stopped / "metrics.csv").read_bytes() == (run.path / "metrics.csv").read_bytes()


def test_a_run_killed_after_its_last_checkpoint_resumes_to_the_model_and_summary_it_would_have_written(run,
                                                                                                    tmp_path):
    """What a kill between the last epoch's checkpoint and the final files leaves: every epoch done,
    no model.pt, no summary.json. --resume trains nothing and writes them, its final figures those of
    a fresh evaluation of the restored model: the uninterrupted run's, figure for figure."""
    killed = copy_of(run, tmp_path / "killed").path
    for name in ("model.pt", "summary.json"):
        (killed / name).unlink()
    assert main(["--out", str(killed), "--resume"]) == 0
    resumed = Run(killed)
    assert resumed.weights == run.weights and resumed.metrics == run.metrics
    assert {name: value for name, value in resumed.summary.items() if name != "train_seconds"} == {
        name: value for name, value in run.summary.items() if name != "train_seconds"}


def test_an_out_made_beforehand_that_holds_no_run_is_trained_into_and_its_files_kept(tmp_path):
    """Only a folder holding a run (its config.json) is refused: one made beforehand (mkdir, a
    notebook's tempfile.mkdtemp()), empty or holding a file of the user's, is a new run's folder."""
    empty, notes = tmp_path / "empty", tmp_path / "notes"
    empty.mkdir()
    notes.mkdir()
    (notes / "notes.txt").write_text("mine\n")
    assert main(["--out", str(empty), *SMALL]) == 0 and main(["--out", str(notes), *SMALL]) == 0
    assert Run(empty).weights == Run(notes).weights
    assert (notes / "notes.txt").read_text() == "mine\n"


def test_a_lock_number_that_names_another_file_by_now_is_left_open(tmp_path):
    """LOCKS keeps the descriptor that locked each folder, to close one that an interrupted main()
    left open. A run that ended closed its own, and the process may reuse that number for a file of
    its own (a notebook's): the next lock of that folder leaves that file open."""
    number = train.lock_run_folder(tmp_path / "run")
    os.close(number)  # the run ended: main() closed its lock
    mine = os.open(tmp_path / "mine.txt", os.O_WRONLY | os.O_CREAT)
    if mine != number:  # the number the lock had, now the process's own file
        os.dup2(mine, number)
        os.close(mine)
    try:
        os.close(train.lock_run_folder(tmp_path / "run"))
        assert os.write(number, b"still open") == 10, "the lock closed a file that was not its own"
    finally:
        os.close(number)


@pytest.mark.parametrize("made", ["nan", "inf"])  # an overflow gives inf before it gives NaN
def test_a_loss_that_is_no_longer_finite_stops_the_run_in_one_line_with_its_row_on_record(made, tmp_path, monkeypatch,
                                                                                         capsys):
    calls = []

    def made_at_step_3(sums):  # whatever the task: its own figures, the loss made NaN or inf at the third step
        figures = metrics_from_sums(sums)
        calls.append(1)
        # 0 * loss + made: exactly NaN or +inf, whatever the sign of the task's loss, still on its graph
        return {**figures, "loss": figures["loss"] * 0 + float(made)} if len(calls) == 3 else figures

    metrics_from_sums = task.metrics_from_sums
    monkeypatch.setattr(task, "metrics_from_sums", made_at_step_3)
    out = tmp_path / "diverged"
    assert main(["--out", str(out), *FAST]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"the loss is {made}" in error
    with open(out / "metrics.csv", newline="", encoding="utf-8") as file:
        last = list(csv.DictReader(file))[-1]
    assert "step 3:" in error and (last["step"], last["split"], last["loss"]) == ("3", "train", made)
    assert not (out / "summary.json").exists() and not (out / "model.pt").exists()


def test_an_update_that_breaks_the_model_is_never_checkpointed_and_the_run_stops_in_one_line(tmp_path, capsys):
    """A step's loss is taken before its update, so an epoch's last update (an --lr far too high) can
    leave a model whose outputs are NaN with no step after it to see it: its validation loss stops
    the run before that model is saved. One step an epoch here; the second update breaks the model,
    whatever the task. The checkpoint kept is whole: --resume in this process (the stop freed the
    folder, as a notebook needs) ends as the run never broken."""
    one_step_an_epoch = ("--epochs", "2", "--device", "cpu", "--max-samples", "16", "--batch-size", "16")
    assert main(["--out", str(tmp_path / "never_broken"), *one_step_an_epoch]) == 0
    updates = []

    def break_the_second(optimizer, args, kwargs):
        updates.append(optimizer)
        if len(updates) == 2:
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for parameter in group["params"]:
                        parameter.mul_(float("nan"))

    hook = register_optimizer_step_post_hook(break_the_second)
    try:
        assert main(["--out", str(tmp_path / "broken"), *one_step_an_epoch]) == 1
    finally:
        hook.remove()
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "epoch 2: the validation loss is nan" in error, error
    broken = tmp_path / "broken"
    assert not (broken / "model.pt").exists() and not (broken / "summary.json").exists()
    assert main(["--out", str(broken), "--resume"]) == 0
    assert Run(broken).weights == Run(tmp_path / "never_broken").weights
    assert (broken / "metrics.csv").read_bytes() == (tmp_path / "never_broken" / "metrics.csv").read_bytes()


def test_a_run_ctrl_c_ended_inside_a_notebook_leaves_its_folder_to_the_kernels_next_run(tmp_path, monkeypatch):
    """A notebook runs main() in its kernel, which outlives each run: a cell interrupted in the third
    step (KeyboardInterrupt inside main()) never reaches the close of the folder's lock. The kernel's
    next run into that folder, its --resume, trains (from the start: no epoch had finished), and
    is not refused as if a run were training there."""
    out, write_row, rows = tmp_path / "interrupted", train.write_row, []

    def interrupted_at_step_3(*args):
        rows.append(args)
        if len(rows) == 3:
            raise KeyboardInterrupt
        return write_row(*args)

    monkeypatch.setattr(train, "write_row", interrupted_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        main(["--out", str(out), *FAST])
    monkeypatch.setattr(train, "write_row", write_row)
    assert main(["--out", str(out), "--resume"]) == 0
    assert main(["--out", str(tmp_path / "never_interrupted"), *FAST]) == 0
    assert Run(out).weights == Run(tmp_path / "never_interrupted").weights
    # A run that finished frees its folder as main() returns, not when the kernel ends: a second
    # process's --resume or a look at it is not refused meanwhile.
    assert lock_is_free(out) and lock_is_free(tmp_path / "never_interrupted")
    held = train.lock_run_folder(tmp_path / "held")
    if held is not None:  # the control: a lock that this process holds is seen
        assert not lock_is_free(tmp_path / "held")
        os.close(held)


def lock_is_free(folder: Path) -> bool:
    """Whether a new descriptor of `folder` takes its lock now: no descriptor, of this process or
    another, holds it (flock locks an open file description, not a process). Windows: no lock."""
    try:
        import fcntl
    except ImportError:
        return True
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)


def test_max_samples_0_takes_every_sample_and_a_number_the_first_that_many():
    """--max-samples' default, 0, is the whole split (the README's full runs), not an empty one."""
    dataset = torch.utils.data.TensorDataset(torch.arange(10.0))
    assert first(dataset, 0) is dataset and first(dataset, 10) is dataset and first(dataset, 25) is dataset
    assert [float(sample) for (sample,) in first(dataset, 3)] == [0.0, 1.0, 2.0]


def test_each_step_draws_from_its_own_key_counted_over_the_whole_run(tmp_path, monkeypatch):
    """What the process did: at each training step's forward pass, torch's generator (dropout's) is
    where seed_step(seed, step) puts it, the step counted from 1 over the whole run, not within its
    epoch (every epoch would then draw the first epoch's dropout masks again, and two runs, or a
    resumed one, would still agree)."""
    states, make_model = [], task.make_model

    def recorded(config, train_set):  # whatever the task's model: the generator at each training forward pass
        model = make_model(config, train_set)
        model.register_forward_pre_hook(lambda module, inputs: states.append(torch.get_rng_state())
                                        if module.training else None)
        return model

    monkeypatch.setattr(task, "make_model", recorded)
    assert main(["--out", str(tmp_path / "run"), *FAST, "--seed", "5"]) == 0
    with open(tmp_path / "run" / "metrics.csv", newline="", encoding="utf-8") as file:
        steps = [int(row["step"]) for row in csv.DictReader(file) if row["split"] == "train"]
    assert steps == list(range(1, len(steps) + 1)) and len(states) == len(steps) > 2
    for step, state in zip(steps, states, strict=True):
        seed_step(5, step)
        assert torch.equal(state, torch.get_rng_state()), f"step {step} drew from another key than (seed, {step})"


def copy_of(run: Run, folder) -> Run:
    shutil.copytree(run.path, folder)
    return Run(folder)


def refused_on_resume(folder, capsys) -> str:
    """--resume of `folder`: exit 2 and one line (returned), every file left as it was."""
    before = {path: path.read_bytes() for path in folder.iterdir()}
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(folder), "--resume"])
    error = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(error.splitlines()) == 1, error
    assert {path: path.read_bytes() for path in folder.iterdir()} == before
    return error


@pytest.mark.parametrize("short_by", [1, 3, "all", "the file"])
def test_resume_refuses_a_metrics_csv_with_fewer_rows_than_its_checkpoint_counted(short_by, run, tmp_path, capsys):
    """One row short is the case a check off by one lets through (the header is a line, not a row);
    a metrics.csv deleted has no rows either, and gets the same line (before, a missing file's error, exit 1)."""
    folder = copy_of(run, tmp_path / "cut").path
    counted = torch.load(folder / "checkpoint.pt", weights_only=True)["rows"]
    kept = 0 if short_by in ("all", "the file") else counted - short_by
    lines = (folder / "metrics.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "metrics.csv").write_text("".join(lines[:1 + kept]), encoding="utf-8")
    if short_by == "the file":
        (folder / "metrics.csv").unlink()
    assert f"has {kept} rows; the checkpoint counted {counted}" in refused_on_resume(folder, capsys)


def test_resume_refuses_a_checkpoint_that_counts_rows_below_zero_and_keeps_every_row(run, tmp_path, capsys):
    """A crafted count that no run writes: -1 would cut metrics.csv to lines[:0], nothing at all."""
    folder = copy_of(run, tmp_path / "crafted").path
    torch.save({**torch.load(folder / "checkpoint.pt", weights_only=True), "rows": -1}, folder / "checkpoint.pt")
    assert "the checkpoint counted -1" in refused_on_resume(folder, capsys)


@pytest.mark.parametrize("text", ["", '{"seed": 3', "[1, 2]", '{"seed": 3}', "7"],
                         ids=["empty", "cut short", "a list", "settings left out", "a number"])
def test_resume_refuses_a_config_json_it_cannot_read_back(text, run, tmp_path, capsys):
    folder = copy_of(run, tmp_path / "config").path
    (folder / "config.json").write_text(text, encoding="utf-8")
    assert "config.json" in refused_on_resume(folder, capsys)


@pytest.mark.parametrize("name, value, said", [
    ("lr", None, "argument --lr"), ("seed", [3], "argument --seed"), ("momentum", 1.5, "argument --momentum"),
    ("epochs", "five", "argument --epochs"), ("deterministic", "sometimes", "argument --deterministic"),
    ("device", "cuda:99", "device 'cuda:99'"),  # a GPU run's folder resumed on a machine without that GPU
])
def test_resume_checks_each_recorded_setting_as_a_typed_flag_and_refuses_one_edited_wrong_in_one_line(
        name, value, said, run, tmp_path, capsys):
    """Before, each of these reached the code that uses it: a traceback (TypeError, ValueError)."""
    folder = copy_of(run, tmp_path / "edited").path
    recorded = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**recorded, name: value}), encoding="utf-8")
    assert f"--resume: {folder / 'config.json'}: {said}" in refused_on_resume(folder, capsys)


class RunsCode:
    """Unpickled with code allowed, it makes the folder it names: the sign that the code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


@pytest.mark.parametrize("content", ["another project's", "a wrapped model's", "without its row count",
                                     "crafted to run code", "cut short"])
def test_resume_refuses_a_checkpoint_that_is_not_this_runs_in_one_line(content, run, tmp_path, capsys):
    folder = copy_of(run, tmp_path / "checkpoint").path
    checkpoint = folder / "checkpoint.pt"
    if content == "another project's":
        torch.save({"model": {"other.weight": torch.zeros(1)}, "optimizer": {}, "epoch": 0, "rows": 1}, checkpoint)
    elif content == "a wrapped model's":  # this run's own, every name as DistributedDataParallel prefixes it
        saved = torch.load(checkpoint, weights_only=True)
        torch.save({**saved, "model": {f"module.{name}": value for name, value in saved["model"].items()}}, checkpoint)
    elif content == "without its row count":  # this run's weights, from a checkpoint of another layout
        torch.save({key: value for key, value in torch.load(checkpoint, weights_only=True).items() if key != "rows"},
                   checkpoint)
    elif content == "crafted to run code":
        checkpoint.write_bytes(pickle.dumps({"model": RunsCode(tmp_path / "the code ran")}, protocol=2))
    else:
        checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    assert "is not a checkpoint of this run" in refused_on_resume(folder, capsys)
    assert not (tmp_path / "the code ran").exists(), "loading the checkpoint ran the code it carried"


def test_ctrl_c_ends_the_run_in_one_line_with_exit_130_and_its_last_checkpoint_whole(tmp_path, monkeypatch, capsys):
    evaluations = []

    def interrupted_in_epoch_2(*args):
        evaluations.append(1)
        if len(evaluations) == 2:  # epoch 2's evaluation: epoch 1's checkpoint is written
            raise KeyboardInterrupt
        return evaluate(*args)

    evaluate = train.evaluate
    monkeypatch.setattr(train, "evaluate", interrupted_in_epoch_2)
    monkeypatch.setattr(sys, "argv", ["train", "--out", str(tmp_path / "run"), *FAST])
    assert train.command_line() == 130
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "interrupted" in error and "--resume" in error
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["epoch"] == 0
    assert not (tmp_path / "run" / "checkpoint.partial").exists()


class FillingDisk:
    """A stand-in for `open` in train.py whose `number`-th file opened for writing takes half of what
    is written to it, then raises as a full disk does (the files before it are written whole)."""

    def __init__(self, number: int) -> None:
        self.number, self.opened = number, []

    def __call__(self, path, mode="r", *args, **kwargs):
        file = open(path, mode, *args, **kwargs)
        if "w" in mode and "b" in mode:
            self.opened.append(Path(path).name)
            if len(self.opened) == self.number:
                return HalfWritten(file)
        return file


class HalfWritten:
    """A file whose first write takes half of its bytes, then fails: the disk is full."""

    def __init__(self, file) -> None:
        self.file = file

    def write(self, data) -> int:
        self.file.write(bytes(data)[: len(data) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self) -> HalfWritten:
        return self

    def __exit__(self, *exception) -> None:
        self.file.close()


@pytest.mark.parametrize("number, written", [(2, "checkpoint.partial"), (3, "model.partial"), (4, "summary.partial")],
                         ids=["epoch 2's checkpoint", "model.pt", "summary.json"])
def test_a_full_disk_is_one_line_and_exit_1_leaving_the_last_checkpoint_and_no_partial_file(number, written, tmp_path,
                                                                                           monkeypatch, capsys):
    """Whichever file the disk fills up in: the files before it whole, that one not there at all
    (model.pt and summary.json as checkpoint.pt: written beside, then renamed), and --resume then
    ends the run as one never stopped (the oracle: the weights' hash of the run without a full disk)."""
    disk = FillingDisk(number)
    monkeypatch.setattr(train, "open", disk, raising=False)
    monkeypatch.setattr(sys, "argv", ["train", "--out", str(tmp_path / "run"), *FAST])
    assert train.command_line() == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "No space left on device" in error
    assert disk.opened[-1] == written  # the fake filled the disk where the test meant it to
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["epoch"] == (0 if number == 2 else 1)
    assert sorted(path.name for path in (tmp_path / "run").iterdir()) == sorted(
        ["checkpoint.pt", "config.json", "environment.json", "metrics.csv", "model.pt"][: 5 if number == 4 else 4])
    monkeypatch.undo()
    assert main(["--out", str(tmp_path / "run"), "--resume"]) == 0
    assert main(["--out", str(tmp_path / "whole"), *FAST]) == 0
    assert Run(tmp_path / "run").summary["weights_sha256"] == Run(tmp_path / "whole").summary["weights_sha256"]


def test_an_out_under_a_file_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setattr(sys, "argv", ["train", "--out", str(tmp_path / "file" / "run"), *FAST])
    assert train.command_line() == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("inputs, outputs", [(2**25, 2**25), (2**62, 4)], ids=["4 PiB", "2**64 numbers"])
def test_a_model_too_large_for_memory_is_one_line_and_exit_1_and_writes_nothing(inputs, outputs, tmp_path,
                                                                                monkeypatch, capsys):
    """What `--width 1000000000` does to the example's model, whatever the task: a real request for
    more memory than any machine has. Another RuntimeError is a mistake in the code: its traceback stays."""
    monkeypatch.setattr(task, "make_model", lambda config, train_set: torch.nn.Linear(inputs, outputs))
    monkeypatch.setattr(sys, "argv", ["train", "--out", str(tmp_path / "run"), *FAST])
    assert train.command_line() == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.startswith(f"python -m {PACKAGE}.train: error: out of memory ")
    assert "--batch-size" in error and not (tmp_path / "run").exists()  # the model is made before the folder

    def a_mistake(config, train_set):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (64x784 and 64x10)")

    monkeypatch.setattr(task, "make_model", a_mistake)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        train.command_line()


HELD_AT_STEP_3 = """
import signal, sys
from pathlib import Path
from torch.optim.optimizer import register_optimizer_step_pre_hook
from {package} import train

def hold(optimizer, args, kwargs):  # before the third optimizer.step(): the run is training
    hold.steps += 1
    if hold.steps == 3:
        Path(sys.argv[1]).write_text("held")
        signal.pause()  # until the test's SIGKILL
hold.steps = 0
register_optimizer_step_pre_hook(hold)
sys.exit(train.main(sys.argv[2:]))
"""


def test_a_folder_a_run_is_training_in_is_refused_to_a_second_run_and_to_resume_until_that_run_ends(
        tmp_path, capsys):
    out, marker = tmp_path / "live", tmp_path / "held"
    live = subprocess.Popen([sys.executable, "-c", HELD_AT_STEP_3.format(package=PACKAGE), str(marker), "--out",
                             str(out), *FAST], env=python_env(), start_new_session=True, stderr=subprocess.PIPE)
    try:
        wait_for(marker, live)
        before = {path: path.read_bytes() for path in out.iterdir()}
        # Refused at once, not made to wait for the folder to be free (then it would write its rows
        # after the live run's): HANG, a limit that only ends a hang, turns a wait into a failure.
        signal.signal(signal.SIGALRM, waited_for_the_lock)
        signal.alarm(HANG)
        with pytest.raises(SystemExit) as exit_info:
            main(["--out", str(out), "--resume"])  # the live run has no checkpoint yet: it would start over
        error = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and len(error.splitlines()) == 1 and "in use" in error
        if Path("/proc/locks").exists():  # Linux names the process that holds the lock; macOS says "a run"
            assert f"process {live.pid} is training there now" in error, error
        with pytest.raises(SystemExit):  # a second new run that got past settings() before config.json was written
            train.lock_run_folder(out)
        signal.alarm(0)
        assert "in use" in capsys.readouterr().err
        assert {path: path.read_bytes() for path in out.iterdir()} == before
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        os.killpg(live.pid, signal.SIGKILL)
        live.wait()
    os.close(train.lock_run_folder(out))  # the control: the killed run's lock went with it


def waited_for_the_lock(signum, frame):
    raise AssertionError(f"still waiting for the folder's lock after {HANG} s, where it must be refused at once")
