"""Specifications: the weights depend on the config alone, not on how the run was executed.

Each comparison has its negative control (another seed differs) in test_train.py; here the
control is repeated where a test could otherwise pass by comparing a run with itself.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.train import main

from conftest import FAST, PACKAGE, DrawsFrom, python_env, read_run

STRINGS = "{'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'}"


def test_the_worker_count_changes_no_loss_and_no_weight(runs):
    reference = runs["seed7"]
    for name in ("seed7_workers2_persistent", "seed7_workers3_eval_never"):
        assert runs[name].config["num_workers"] != reference.config["num_workers"]
        assert runs[name].train_losses == reference.train_losses, name
        assert runs[name].weights == reference.weights, name
    assert runs["seed8"].weights != reference.weights


def test_reading_the_metrics_back_every_step_or_every_50_gives_the_same_rows(runs):
    every_step, default = runs["seed7_workers3_eval_never"], runs["seed7"]
    assert every_step.config["log_every"] == 1 and default.config["log_every"] == 50
    train_rows = [[row for row in run.metrics if row["split"] == "train"] for run in (every_step, default)]
    assert train_rows[0] == train_rows[1]


def test_a_dataset_that_declares_fewer_generators_gives_the_same_weights_with_0_and_2_workers(tmp_path, monkeypatch):
    """draws_from = ("torch",): only torch's generator is seeded before each sample, and that is
    enough for a dataset that draws from torch alone (the negative control, a generator left
    unseeded, is in test_data.py). In this process, to keep the suite fast: the runs differ only in
    their worker count, and workers are processes of their own anyway."""
    real = task.make_datasets

    def torch_only(config):
        train_set, val_set = real(config)
        return DrawsFrom(train_set, "torch", draws_from=("torch",)), val_set

    monkeypatch.setattr(task, "make_datasets", torch_only)
    for workers in (0, 2):
        assert main(["--out", str(tmp_path / f"workers{workers}"), *FAST, "--epochs", "1", "--seed", "7",
                     "--num-workers", str(workers)]) == 0
    zero, two = read_run(tmp_path / "workers0"), read_run(tmp_path / "workers2")
    assert zero.train_losses == two.train_losses
    assert zero.weights == two.weights


def test_persistent_workers_and_prefetch_factor_change_no_weight(runs):
    run = runs["seed7_workers2_persistent"]
    assert run.config["persistent_workers"] and run.config["prefetch_factor"] == 4
    assert run.train_losses == runs["seed7"].train_losses
    assert run.weights == runs["seed7"].weights


def test_how_often_evaluation_runs_changes_no_trained_weight(runs):
    never, every_epoch = runs["seed7_workers3_eval_never"], runs["seed7"]
    assert [r["split"] for r in never.metrics].count("val") == 1  # only the final evaluation
    assert [r["split"] for r in every_epoch.metrics].count("val") == 2
    assert never.train_losses == every_epoch.train_losses
    assert never.weights == every_epoch.weights
    assert never.metrics[-1] == every_epoch.metrics[-1]  # the final evaluation agrees too


def test_the_training_process_hashes_strings_with_the_seed_whatever_the_shell_had(runs):
    assert runs["seed7"].environment["python_hash_seed"] == "7"  # launched with none set
    assert runs["seed7_again"].environment["python_hash_seed"] == "7"  # launched with 123
    assert runs["seed7"].weights == runs["seed7_again"].weights
    # Launched with --seed 7 --seed 8: it trains the last, and hashes with it too.
    assert runs["seed8"].config["seed"] == 8 and runs["seed8"].environment["python_hash_seed"] == "8"


def set_order(code: str, shell_hash_seed: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=python_env(PYTHONHASHSEED=shell_hash_seed))
    return result.stdout


def test_a_set_of_strings_iterates_in_one_order_from_shells_with_different_hash_seeds():
    relaunched = (f"from {PACKAGE}.engine.startup import relaunch_with_run_environment\n"
                  f"relaunch_with_run_environment(['--seed', '7'], default_seed=0)\n"
                  f"print(list({STRINGS}))")
    assert set_order(relaunched, "1") == set_order(relaunched, "2")


def test_negative_control_plain_interpreters_with_those_hash_seeds_iterate_differently():
    plain = f"print(list({STRINGS}))"
    assert set_order(plain, "1") != set_order(plain, "2")


def test_the_thread_count_in_effect_is_the_configured_one(runs):
    assert runs["seed7_threads2"].config["threads"] == 2
    assert runs["seed7_threads2"].environment["intra_op_threads"] == 2
    assert runs["seed7"].environment["intra_op_threads"] == runs["seed7"].config["threads"] == 1


def test_a_resumed_run_relaunches_with_the_recorded_seed_when_no_seed_is_typed(tmp_path):
    (tmp_path / "config.json").write_text('{"seed": 7}')
    code = (f"from {PACKAGE}.engine.startup import relaunch_with_run_environment\n"
            f"relaunch_with_run_environment(['--out', {str(tmp_path)!r}, '--resume'], default_seed=42)\n"
            f"from {PACKAGE}.utils.hashseed import hash_seed_in_effect\n"  # not via repro.py: no torch to load
            f"print(hash_seed_in_effect())")
    assert set_order(code, "123").strip() == "7"


def test_the_hash_seed_scan_leaves_every_malformed_command_line_to_train():
    from {{ cookiecutter.project_slug }}.engine.startup import seed_from_command_line

    assert seed_from_command_line(["--seed"], 5) == "5"  # no value: the default, and train reports it
    assert seed_from_command_line(["--out"], 5) == "5"
    assert seed_from_command_line(["--resume", "--out"], 5) == "5"
    assert seed_from_command_line(["--seed=9"], 5) == "9"
    assert seed_from_command_line(["--out", "x", "--seed", "8"], 5) == "8"


@pytest.mark.parametrize("command, as_train", [
    (["python", "-m", "PKG.train"], True),
    (["python", "-mPKG.train", "--seed", "3"], True),
    (["python", "-u", "-m", "PKG.train"], True),  # a flag with no value
    (["python", "-W", "error", "-m", "PKG.train"], True),  # the two options whose value is the next word
    (["python", "-X", "importtime", "-m", "PKG.train"], True),
    (["python", "-X", "importtime", "-W", "error", "-m", "PKG.train"], True),
    (["python", "-m", "PKG.verify"], False),
    (["python", "-m"], False),
    (["python", "-c", "import PKG.train"], False),
    (["python", "train.py"], False),
])
def test_the_interpreter_is_seen_started_as_the_training_module_whatever_its_options(command, as_train, monkeypatch):
    """What decides whether train fixes PYTHONHASHSEED by relaunching: `python -X importtime -m
    ...train` is the training module as much as `python -m ...train` is."""
    from {{ cookiecutter.project_slug }}.engine.startup import started_as_module

    monkeypatch.setattr(sys, "orig_argv", [word.replace("PKG", PACKAGE) for word in command])
    assert started_as_module(f"{PACKAGE}.train") is as_train


@pytest.mark.parametrize("seed, fixed", [("0", True), ("7", True), ("MAX", True), ("MAX+1", False), ("-1", False),
                                         ("x", False)])
def test_every_seed_train_accepts_fixes_the_hash_seed_before_torch_loads_the_largest_too(seed, fixed):
    """The relaunch's variables: PYTHONHASHSEED from any seed in 0 .. MAX_SEED; none from a seed that
    train's parser refuses, so that train says why in one line instead of a relaunch."""
    from {{ cookiecutter.project_slug }}.engine.startup import hash_seed_for, run_environment
    from {{ cookiecutter.project_slug }}.utils.repro import MAX_SEED

    seed = seed.replace("MAX+1", str(MAX_SEED + 1)).replace("MAX", str(MAX_SEED))
    wanted = run_environment(["--seed", seed], 5)
    assert wanted.get("PYTHONHASHSEED") == (hash_seed_for(int(seed)) if fixed else None)


def test_python_dash_m_the_package_lists_its_commands():
    result = subprocess.run([sys.executable, "-m", PACKAGE], capture_output=True, text=True, env=python_env())
    assert result.returncode == 0
    for command in ("train", "verify", "compare", "doctor"):
        assert f"python -m {PACKAGE}.{command} " in result.stdout
    assert f"torchrun --standalone --nproc-per-node 2 -m {PACKAGE}.train" in result.stdout
