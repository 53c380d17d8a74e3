"""Specifications of a training run, checked on real runs in fresh processes."""

from __future__ import annotations

import re
import shutil

import pytest
import torch

from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config, build_parser
from {{ cookiecutter.project_slug }}.engine import plan
from {{ cookiecutter.project_slug }}.engine.cli import configure_logging, logger
from {{ cookiecutter.project_slug }}.engine.plan import available_cpus, length_problem
from {{ cookiecutter.project_slug }}.engine.runs import read_run
from {{ cookiecutter.project_slug }}.train import evaluation_due, main
from {{ cookiecutter.project_slug }}.utils.device import select_device
from {{ cookiecutter.project_slug }}.utils.repro import state_dict_sha256

from conftest import FAST, settings, steps_per_epoch


def test_one_seed_in_two_fresh_processes_gives_identical_losses_and_weights(runs):
    first, second = runs["seed7"], runs["seed7_again"]
    assert first.metrics == second.metrics  # every step's loss and every evaluation, bit for bit
    assert first.weights == second.weights


def test_another_seed_gives_other_losses_and_weights(runs):
    """The negative control: without it, the tests above could pass by never changing anything."""
    assert runs["seed8"].weights != runs["seed7"].weights
    assert runs["seed8"].train_losses != runs["seed7"].train_losses


def test_model_pt_loads_strictly_into_a_fresh_model_and_has_the_recorded_weights_hash(runs):
    """Every entry of the state dict is saved (BatchNorm's statistics too): a fresh model built as
    train.py builds it takes model.pt with strict=True, and the hash covers all of it."""
    from {{ cookiecutter.project_slug }}.config import Config

    run = runs["seed7"]
    state_dict = torch.load(run.path / "model.pt", weights_only=True)
    config, _ = Config.from_dict(run.config)
    fresh = task.make_model(config, task.make_datasets(config)[0])
    fresh.load_state_dict(state_dict, strict=True)
    assert list(state_dict) == list(fresh.state_dict())
    assert state_dict_sha256(fresh.state_dict()) == state_dict_sha256(state_dict) == run.weights


def test_a_run_folder_records_config_environment_metrics_and_summary(runs):
    run = runs["seed7"]
    assert sorted(p.name for p in run.path.iterdir()) == [  # no tensorboard/: not asked for
        "checkpoints", "config.json", "environment.json", "metrics.csv", "model.pt", "summary.json"]
    assert run.config["seed"] == 7 and run.config["epochs"] == 2
    assert {"torch", "numpy", "python", "cuda", "cudnn", "device", "determinism",
            "intra_op_threads", "environment_variables", "git_commit"} <= run.environment.keys()
    assert run.environment["intra_op_threads"] == run.config["threads"]
    assert {"seed", "weights_sha256", "train_seconds", "val_loss", "headline_metric"} <= run.summary.keys()
    assert run.summary["headline_metric"] == task.HEADLINE_METRIC
    train_rows = [row for row in run.metrics if row["split"] == "train"]
    assert [int(row["step"]) for row in train_rows] == list(range(1, run.summary["steps"] + 1))
    header = (run.path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[:5] == ["epoch", "step", "split", "lr", "loss"] and tuple(header[4:]) == run.metric_names
    assert all(float(row["lr"]) > 0 for row in train_rows)  # the learning rate each step took
    assert all(row["lr"] == "" for row in run.metrics if row["split"] == "val")
    assert run.summary["metrics"] == list(run.metric_names)  # the task's figures, every one carried through
    assert sum(row["split"] == "val" for row in run.metrics) == run.config["epochs"]


def test_the_last_metrics_row_holds_the_summarys_figures_exactly(runs):
    """metrics.csv keeps every bit (repr of each float): a writer that rounded would hide drift
    from every comparison of two runs, so its final row must equal the summary's floats."""
    for run in runs.values():
        last = run.metrics[-1]
        assert last["split"] == "val"
        for name in run.metric_names:
            assert float(last[name]) == run.summary[f"val_{name}"], name


def test_environment_json_records_the_float32_precision_in_effect(runs):
    from {{ cookiecutter.project_slug }}.utils.repro import PYTORCH_DEFAULT_FLOAT32

    run = runs["seed7"]
    flags = run.environment["determinism"]
    if run.config["deterministic"] == "off":  # PyTorch's defaults, TF32 for cuDNN convolutions included
        assert flags["float32_precision"] == PYTORCH_DEFAULT_FLOAT32 and flags["tf32_allowed"] is True
    else:  # strict and warn: full float32, no TF32
        assert flags["float32_precision"]["conv"] == "ieee" and flags["tf32_allowed"] is False


def test_the_run_records_the_device_it_used_not_only_auto(runs):
    run = runs["seed7"]
    assert run.config["device"] == "cpu"
    assert run.summary["device"] == run.environment["device"] == "cpu"


def test_a_run_on_auto_records_auto_as_asked_and_the_device_it_chose_as_used(tmp_path):
    """config.json keeps what was asked (a rerun on another machine chooses again); summary.json
    and environment.json say what this run trained on."""
    assert main([*FAST, "--device", "auto", "--out", str(tmp_path / "run")]) == 0  # the later --device wins
    run = read_run(tmp_path / "run")
    assert run.config["device"] == "auto"
    assert run.summary["device"] == run.environment["device"] == str(select_device("auto"))


@pytest.mark.parametrize("typed", ["CPU", " cpu", "Cpu "])
def test_device_names_are_recorded_in_one_spelling(typed, tmp_path):
    from {{ cookiecutter.project_slug }}.config import parse_command_line

    typed_settings, _ = parse_command_line(["--device", typed])
    assert typed_settings["device"] == "cpu"


def test_an_out_folder_that_holds_a_run_is_refused_and_left_intact(runs, capsys):
    out = runs["seed8"].path
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(out), *FAST, "--seed", "8"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and len(err.strip().splitlines()) == 1
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


@pytest.mark.parametrize("epochs, every, due", [(4, 2, [1, 3]), (5, 2, [1, 3, 4]), (6, 4, [3, 5]), (3, 1, [0, 1, 2]),
                                                 (3, 0, [2]), (1, 3, [0])])
def test_evaluation_runs_after_every_nth_epoch_and_after_the_last(epochs, every, due):
    """--eval-every N: after epochs N, 2N, ... (counted from 1) and always after the last; 0: the last only."""
    config = settings(epochs=epochs, eval_every=every)
    assert [epoch for epoch in range(epochs) if evaluation_due(epoch, epochs, config)] == due


def test_overwrite_replaces_the_run_and_only_the_run(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "summary.json").write_text("{}")
    (out / "checkpoints" / "step-00000099.pt").write_text("old")
    (out / "notes.txt").write_text("the user's own file")
    # What only some runs write: left behind, it would describe the new run (compare would call it
    # DIFFERENT from a run that never resumed; verify would compare another machine's fingerprint).
    for name in ("world_sizes.json", "fingerprint.json"):
        (out / name).write_text('{"from": "the earlier run"}')
    assert main(["--out", str(out), *FAST, "--epochs", "1", "--overwrite"]) == 0  # in this process
    assert "weights_sha256" in (out / "summary.json").read_text()
    assert not (out / "checkpoints" / "step-00000099.pt").exists()
    assert not (out / "world_sizes.json").exists() and not (out / "fingerprint.json").exists()
    assert (out / "notes.txt").read_text() == "the user's own file"


BAD_FLAGS = {
    "negative seed": ("--seed", "-1"),
    "seed above 2**32-1": ("--seed", "4294967296"),
    "zero epochs": ("--epochs", "0"),
    "learning rate not a number": ("--lr", "fast"),
    "comma-separated GPUs": ("--device", "cuda:1,2"),
    "unknown device": ("--device", "gpu"),
    "unknown determinism mode": ("--deterministic", "sometimes"),
    "abbreviated flag": ("--epoch", "3"),
    "prefetch without workers": ("--prefetch-factor", "2"),
    "persistent workers without workers": ("--persistent-workers",),
    "resume and overwrite": ("--resume", "--overwrite"),
    "seed without a value": ("--seed",),
    "out without a value": ("--out",),
    "dropout above 1": ("--dropout", "1.5"),
    "batch not shared equally": ("--batch-size", "10", "--accumulate", "3"),
    "warm-up with one-cycle": ("--warmup-steps", "5"),
    "min-lr without the cosine": ("--min-lr", "0.001"),
    "decay steps without the cosine": ("--decay-steps", "5"),
    "min-lr above lr": ("--schedule", "cosine", "--lr", "0.01", "--min-lr", "0.1"),
    "decay steps not after the warm-up": ("--schedule", "cosine", "--warmup-steps", "5", "--decay-steps", "5"),
    "beta2 without adamw": ("--beta2", "0.95"),
    "unknown optimizer": ("--optimizer", "lbfgs"),
    "empty out (an unset shell variable)": ("--out", ""),
    "a name over the file system's limit": ("--out", "x" * 300),
    "threads beyond any machine": ("--threads", "10000"),
    "an evaluation batch beyond 2**63 - 1": ("--val-batch-size", "100000000000000000000"),
}


@pytest.mark.parametrize("flags", BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_bad_flags_give_one_clear_line_and_exit_2_before_touching_anything(flags, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "never"), *flags])
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()
    assert not torch.are_deterministic_algorithms_enabled()  # no global setting was changed yet


@pytest.mark.parametrize("finished", [True, False], ids=["a finished run", "an unfinished run"])
def test_resume_with_overwrite_of_a_run_is_refused_for_the_contradiction_and_leaves_it_as_it_was(finished, runs,
                                                                                                 tmp_path, capsys):
    """Where either flag alone would act (continue the run, or replace it), the two together are still
    refused, for what they are: one of the two requests would otherwise be dropped without a word."""
    folder = shutil.copytree(runs["seed7"].path, tmp_path / "run")
    if not finished:
        (folder / "summary.json").unlink()
        (folder / "model.pt").unlink()
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(folder), "--resume", "--overwrite"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1, err
    assert err[0].endswith("--resume and --overwrite contradict each other: choose one"), err
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before


@pytest.mark.parametrize("flags", [
    ("--num-workers", "100000"), ("--num-workers", "1", "--prefetch-factor", "10000000"),
], ids=["a hundred thousand workers", "a worker loading ten million batches ahead"])
def test_a_loader_no_machine_runs_is_refused_before_any_worker_starts(flags, capsys):
    """Each worker is a process: 100000 kept starting processes until a two-core machine stalled; a
    prefetch of 10**20 batches kept the loader's start looping. The flags alone, so that a bound
    that breaks fails here rather than starting them."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(list(flags))
    assert exit_info.value.code == 2 and f"{flags[-1]} is not in " in capsys.readouterr().err


@pytest.mark.parametrize("flags, start, end", [
    (("--batch-size", "1000000"), "--batch-size 1000000 is more than the ", " training samples (--max-samples "),
    (("--schedule", "cosine", "--warmup-steps", "1000000"), "--warmup-steps 1000000 is longer than the run's ",
     " optimizer steps: the learning rate would never reach --lr"),
], ids=["a batch larger than the data", "a warm-up longer than the run"])
def test_a_batch_or_a_warm_up_the_data_cannot_fill_is_one_line_and_exit_2_writing_no_file(flags, start, end, tmp_path,
                                                                                           capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "never"), *FAST, *flags])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and start in line and end in line, line
    assert list(tmp_path.rglob("*")) == []  # not even the folder, which the run had made before it had the data


def test_a_batch_of_all_the_samples_and_a_warm_up_of_the_whole_run_are_accepted():
    """The edges of the refusals above: a run may take its whole training set as one batch, and warm up to its
    last step (the refusal's arithmetic, not a run: the run's checks are the ones above)."""
    config = Config(batch_size=16, schedule="cosine", warmup_steps=8)
    assert length_problem(config, train_samples=16, steps=8) is None
    assert "--batch-size 16 is more than the 15 training samples:" in length_problem(config, 15, 8)
    assert "--warmup-steps 8 is longer than the run's 7 optimizer steps" in length_problem(config, 16, 7)


@pytest.mark.parametrize("threads, warned", [(2, False), (3, True)])
def test_more_threads_than_the_machine_lets_the_process_use_is_warned_in_one_line(threads, warned, tmp_path,
                                                                                  monkeypatch, capsys):
    monkeypatch.setattr(plan, "available_cpus", lambda: 2)
    plan.plan_run(["--out", str(tmp_path / "run"), "--threads", str(threads)])
    err = capsys.readouterr().err
    assert (f"warning: --threads {threads} is more than the 2 CPU(s) this process may use" in err) is warned, err
    assert len(err.splitlines()) == warned


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA; the refusal is for CPU-only machines")
def test_asking_for_cuda_without_it_names_the_available_devices(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "never"), "--device", "cuda"])
    assert "not available here; available: cpu" in capsys.readouterr().err


def test_an_out_path_through_a_file_is_refused_with_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "file" / "run")])
    assert exit_info.value.code == 2
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.parametrize("out", ["/proc/x", "/sys/x", "/proc/x/y"])
def test_an_out_folder_that_cannot_be_created_gets_one_line_and_exit_2(out, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", out])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--out {out}" in err


def test_run_files_get_the_usual_permissions_not_private_ones(runs):
    import os

    umask = os.umask(0)
    os.umask(umask)
    for name in ("config.json", "metrics.csv", "model.pt", "summary.json"):
        assert (runs["seed7"].path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


def test_each_epoch_prints_its_mean_training_loss_and_the_validation_figures_when_it_evaluated(runs):
    printed = runs["seed7"].path.with_suffix(".out").read_text().splitlines()
    steps_per_epoch = runs["seed7"].summary["steps"] // 2
    assert printed[0].startswith(f"epoch 1/2  step {steps_per_epoch}  train_loss ")
    assert all(f"val_{name} " in printed[0] for name in runs["seed7"].metric_names)
    never = runs["seed7_workers3_eval_never"].path.with_suffix(".out").read_text().splitlines()
    assert "train_loss" in never[0] and "val_loss" not in never[0]  # no evaluation after epoch 1


def test_each_epoch_line_gives_its_pace_and_the_two_figures_count_the_epochs_samples(runs):
    """samples/s x ms/step x steps is the epoch's training samples (to the printed digits): each
    sample counted once, whatever the batches; the timings are printed, never recorded."""
    run = runs["seed7"]
    samples = min(len(task.make_datasets(Config(**run.config))[0]), run.config["max_samples"] or 10**12)
    for line in run.path.with_suffix(".out").read_text().splitlines()[:2]:
        # a task that counts tokens (docs/tasks.md's language model) prints its tokens/s between the two
        match = re.search(r"  step (\d+) .*  ([\d.]+) samples/s  (?:(\d+) tokens/s  )?([\d.]+) ms/step", line)
        assert match, line
        steps = int(match[1]) - (int(match[1]) // 2 if line.startswith("epoch 2/") else 0)
        assert float(match[2]) * float(match[4]) / 1000 * steps == pytest.approx(samples, rel=0.02), line
    assert "samples/s" not in (run.path / "metrics.csv").read_text() + (run.path / "summary.json").read_text()


def test_without_out_a_run_goes_to_runs_seed_n_for_the_seed_typed(tmp_path, monkeypatch):
    """The README's default: two seeds typed without --out never write into one folder."""
    from {{ cookiecutter.project_slug }} import DEFAULT_SEED

    seed = (DEFAULT_SEED + 1) % 2**32  # not the default, whatever seed the project was baked with
    monkeypatch.chdir(tmp_path)
    assert main([*FAST, "--epochs", "1", "--seed", str(seed)]) == 0  # in this process
    assert [path.name for path in (tmp_path / "runs").iterdir()] == [f"seed{seed}"]
    assert (tmp_path / "runs" / f"seed{seed}" / "summary.json").is_file()


def saved_initial_weights(path, seed: int = 123) -> dict:
    """The task's model built from another seed, saved to `path` as a model.pt is: weights that no
    run here starts from by itself."""
    torch.manual_seed(seed)
    config = Config(**settings().to_dict())
    train_set, _ = task.make_datasets(config)
    weights = task.make_model(config, train_set).state_dict()
    torch.save(weights, path)
    return weights


def test_init_from_starts_the_run_from_the_files_weights_and_records_their_hash(tmp_path, monkeypatch):
    """The weights the first step trains are those of the file, bit for bit (taken as train.py
    hands the model to prepare_for_training, before any step); the control: without --init-from
    they are the task's own. config.json records the file, absolute, and its weights_sha256."""
    from {{ cookiecutter.project_slug }} import train

    weights, seen = saved_initial_weights(tmp_path / "start.pt"), {}
    prepare = train.prepare_for_training
    monkeypatch.setattr(train, "prepare_for_training", lambda model, *rest: seen.setdefault(
        len(seen), {name: tensor.clone() for name, tensor in model.state_dict().items()}) and prepare(model, *rest))
    monkeypatch.chdir(tmp_path)  # the file given relative to the working folder, as a user types it
    assert main(["--out", "from_file", *FAST, "--epochs", "1", "--init-from", "start.pt"]) == 0
    assert main(["--out", "own", *FAST, "--epochs", "1"]) == 0
    started, own = seen[0], seen[1]
    assert started.keys() == weights.keys() and all(torch.equal(started[name], weights[name]) for name in weights)
    assert not all(torch.equal(own[name], weights[name]) for name in weights)
    config = read_run(tmp_path / "from_file").config
    assert config["init_from"] == str(tmp_path / "start.pt")
    assert config["init_from_sha256"] == state_dict_sha256(weights)
    assert read_run(tmp_path / "own").config["init_from"] == "none"


def test_a_run_started_from_a_file_resumes_without_it_to_the_weights_of_one_never_stopped(tmp_path):
    """Its checkpoints hold the model: the file is read only as the run starts."""
    saved_initial_weights(tmp_path / "start.pt")
    flags = [*FAST, "--init-from", str(tmp_path / "start.pt")]
    assert main(["--out", str(tmp_path / "whole"), *flags]) == 0
    assert main(["--out", str(tmp_path / "stopped"), *flags, "--stop-after-steps", "3"]) == 0
    (tmp_path / "start.pt").unlink()
    assert main(["--out", str(tmp_path / "stopped"), "--resume"]) == 0
    whole, resumed = read_run(tmp_path / "whole"), read_run(tmp_path / "stopped")
    assert resumed.weights == whole.weights and resumed.metrics == whole.metrics


def test_verify_reruns_a_run_from_its_init_from_file_and_refuses_in_one_line_once_the_file_changed(tmp_path, capsys):
    """The re-run starts from the file the run recorded: with it unchanged, REPRODUCED; once it holds
    other weights, or is gone, a re-run would prove nothing: one line, exit 2, nothing re-run."""
    from {{ cookiecutter.project_slug }} import verify

    saved_initial_weights(tmp_path / "start.pt")
    flags = [*FAST, "--epochs", "1", "--init-from", str(tmp_path / "start.pt")]
    assert main(["--out", str(tmp_path / "run"), *flags]) == 0
    capsys.readouterr()
    assert verify.main([str(tmp_path / "run")]) == 0
    assert "REPRODUCED" in capsys.readouterr().out
    saved_initial_weights(tmp_path / "start.pt", seed=7)  # other weights under the recorded name
    for says in ("holds other weights than the run started from", "is gone: put the file back"):
        with pytest.raises(SystemExit) as exit_info:
            verify.main([str(tmp_path / "run")])
        captured = capsys.readouterr()
        (line,) = captured.err.strip().splitlines()
        assert exit_info.value.code == 2 and says in line and "re-running" not in captured.out, line
        (tmp_path / "start.pt").unlink(missing_ok=True)  # then: the file gone


def one_tensor_fewer(path) -> None:
    weights = saved_initial_weights(path)
    torch.save(dict(list(weights.items())[1:]), path)


@pytest.mark.parametrize("make, says", [
    (None, "cannot be loaded"),
    (one_tensor_fewer, "does not fit the model task.py makes"),
    (lambda path: path.write_text("{}"), "cannot be loaded: not a checkpoint file"),
], ids=["missing", "weights of another model", "not weights"])
def test_init_from_a_file_without_weights_that_fit_is_one_line_and_exit_2_writing_no_file(make, says, tmp_path,
                                                                                            capsys):
    if make is not None:
        make(tmp_path / "start.pt")
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "never"), *FAST, "--init-from", str(tmp_path / "start.pt")])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and "--init-from" in line and says in line, line
    assert list(tmp_path.rglob("*")) == [tmp_path / "start.pt"] or make is None and list(tmp_path.rglob("*")) == []


def test_log_level_chooses_what_a_run_prints_and_debug_names_each_checkpoint(tmp_path, capsys):
    """debug: also a line per checkpoint, at the steps the test computes (every 4 of FAST's, and
    each epoch's end); info: epochs and result; warning: only the warning (--threads above this
    machine's CPUs gives one); error: nothing. The weights are the same whatever it prints."""
    per_epoch, too_many = steps_per_epoch(), str(available_cpus() + 1)
    printed = {}
    for level in ("debug", "info", "warning", "error"):
        assert main(["--out", str(tmp_path / level), *FAST, "--threads", too_many, "--log-level", level]) == 0
        printed[level] = capsys.readouterr()
    saved = sorted({step for step in range(1, 2 * per_epoch + 1) if step % 4 == 0} | {per_epoch, 2 * per_epoch})
    lines = [line for line in printed["debug"].out.splitlines() if ": checkpoint -> " in line]
    assert [int(line.split(":")[0].removeprefix("step ")) for line in lines] == saved
    assert ": checkpoint -> " not in printed["info"].out and "epoch 2/2" in printed["info"].out
    assert printed["info"].out.splitlines()[-1].startswith("weights_sha256 ")
    warning = f"warning: --threads {too_many} is more than"
    assert all(warning in printed[level].err for level in ("debug", "info", "warning"))
    assert printed["warning"].out == "" and printed["error"].out == printed["error"].err == ""
    weights = {read_run(tmp_path / level).weights for level in printed}
    assert len(weights) == 1


def test_under_torchrun_rank_0_prints_for_all_and_every_rank_prints_its_errors(monkeypatch, capsys):
    configure_logging("info")
    monkeypatch.setenv("RANK", "1")
    logger.info("progress")
    logger.warning("warning: a note")
    logger.error("broken")
    assert capsys.readouterr() == ("", "broken\n")
    monkeypatch.setenv("RANK", "0")
    logger.info("progress")
    logger.warning("warning: a note")
    assert capsys.readouterr() == ("progress\n", "warning: a note\n")
