"""Specifications of studies: many seeds in one command, each an ordinary run, summarised.

The refusals are fast. The studies themselves train several runs each and are marked `slow`
(`pytest -m slow`, as the CI workflow runs).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.project_slug }} import compare, study, task
from {{ cookiecutter.project_slug }}.config import EXECUTION_ONLY, build_parser
from {{ cookiecutter.project_slug }}.engine.run_folder import out_dir_refusal
from {{ cookiecutter.project_slug }}.engine.signals import PASSED_ON
from {{ cookiecutter.project_slug }}.engine.statistics import statistics_of, t_975

from conftest import BATCH, PACKAGE, SAMPLES, once, python_env, read_run, start, value_of, wait_until

FLAGS = ("--epochs", "1", "--device", "cpu", "--checkpoint-every", "4", "--max-samples", str(SAMPLES),
         "--batch-size", str(BATCH))
HEADLINE = f"val_{task.HEADLINE_METRIC}"


@pytest.mark.parametrize("text, seeds", [("0,1,2", [0, 1, 2]), ("0-3", [0, 1, 2, 3]), ("5, 0-1 ,9", [5, 0, 1, 9])])
def test_seeds_are_lists_and_ranges(text, seeds):
    assert study.parse_seeds(text) == seeds


@pytest.mark.parametrize("text, reason", [("", "is not a seed"), ("1,,2", "is not a seed"), ("a-b", "is not a seed"),
                                          ("3-1", "not a range"), ("0-2,2", "names seed 2 twice"),
                                          ("4294967296", "not a range of seeds")])
def test_bad_seed_lists_are_refused_with_one_line_before_anything_runs(text, reason, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        study.main(["--seeds", text, "--out", str(tmp_path / "s")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and reason in err[0]
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("flags, reason", [(("--epochs", "0"), "argument --epochs: 0 is not at least 1"),
                                           (("--seed", "3"), "--seed is set by the study"),
                                           (("--resume",), "--resume is set by the study"),
                                           (("--seed=3",), "--seed is set by the study"),
                                           (("--stop-after-steps=2",), "--stop-after-steps is set by the study"),
                                           (("--prefetch-factor", "2"), "need --num-workers above 0"),
                                           (("--colour", "red"), "unrecognized arguments: --colour"),
                                           (("--parallel", "fsdp"), "--parallel fsdp needs torchrun")])
def test_a_training_flag_that_train_would_refuse_is_refused_before_anything_runs(flags, reason, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        study.main(["--seeds", "0-1", "--out", str(tmp_path / "s"), *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and reason in err[0] and err[0].startswith(f"python -m {PACKAGE}.study: error:")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_a_study_runs_at_most_jobs_seeds_at_a_time_each_once_in_order(jobs, tmp_path, monkeypatch):
    """run_seeds with stand-ins for a seed's launch and for the reaping, which ends the oldest run at
    each call: never more than --jobs at once, and --jobs reached; every seed launched once, in order."""
    launched, at_once = [], []

    def reap(running, out, metric, quiet):
        at_once.append(len(running))
        running.pop(next(iter(running)))
        return []

    monkeypatch.setattr(study, "launch_seed", lambda seed, out, flags: launched.append(seed) or ("process", seed))
    monkeypatch.setattr(study, "reap", reap)
    assert study.run_seeds([0, 1, 2, 3, 4], tmp_path, [], jobs, None) == []
    assert launched == [0, 1, 2, 3, 4] and max(at_once) == jobs

def test_another_result_setting_for_an_existing_study_is_refused(tmp_path, capsys):
    folder = tmp_path / "s"
    folder.mkdir()
    shared = {k: v for k, v in study.Config().to_dict().items() if k != "seed"}
    (folder / "study.json").write_text(json.dumps({"config": shared, "seeds": [0], "runs": None}))
    lr = study.Config().lr * 10
    with pytest.raises(SystemExit) as exit_info:
        study.main(["--seeds", "0", "--out", str(folder), "--lr", str(lr)])
    assert exit_info.value.code == 2
    assert f"lr: {study.Config().lr} -> {lr}" in capsys.readouterr().err


SHARED = [name for name in study.Config().to_dict() if name != "seed"]  # what a study's runs share


def study_with_one_setting_changed(folder: Path, name: str) -> tuple[dict, dict]:
    """A study.json in `folder` of the default settings; those settings, and them with `name` changed."""
    shared = {key: value for key, value in study.Config().to_dict().items() if key in SHARED}
    (folder / "study.json").write_text(json.dumps({"config": shared, "seeds": [0], "runs": None}))
    return shared, {**shared, name: "another value"}


@pytest.mark.parametrize("name", [name for name in SHARED if name in EXECUTION_ONLY])
def test_a_study_goes_on_under_another_execution_setting(name, tmp_path):
    shared, changed = study_with_one_setting_changed(tmp_path, name)
    assert study.check_study_folder(tmp_path, changed)["config"] == shared


@pytest.mark.parametrize("name", [name for name in SHARED if name not in EXECUTION_ONLY])
def test_a_study_refuses_to_go_on_under_another_result_setting(name, tmp_path, capsys):
    shared, changed = study_with_one_setting_changed(tmp_path, name)
    with pytest.raises(SystemExit) as exit_info:
        study.check_study_folder(tmp_path, changed)
    assert exit_info.value.code == 2
    assert f"{name}: {shared[name]!r} -> 'another value'" in capsys.readouterr().err


def test_summarise_refuses_seed_folders_that_are_not_one_study(runs, tmp_path, capsys):
    """The summary's negative controls: it exists to summarise runs that differ in the seed alone,
    so a run with another setting, or a run filed under another seed's folder, is refused, and so
    is a training flag typed beside --summarise."""
    def study_folder(name: str, seed_7: str, seed_8: str) -> Path:
        for seed, run in (("7", seed_7), ("8", seed_8)):
            shutil.copytree(runs[run].path, tmp_path / name / f"seed-{seed}")
        return tmp_path / name

    def refused(folder: Path, *flags: str) -> str:
        with pytest.raises(SystemExit) as exit_info:
            study.main(["--seeds", "7,8", "--out", str(folder), "--summarise", *flags])
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(err) == 1
        return err[0]

    honest = study_folder("honest", "seed7", "seed8")
    assert study.main(["--seeds", "7,8", "--out", str(honest), "--summarise"]) == 0
    capsys.readouterr()
    # A training flag beside --summarise would describe runs that were not made with it.
    summary = {path.name: path.read_bytes() for path in honest.iterdir() if path.is_file()}
    assert "--summarise trains nothing: leave out --lr" in refused(honest, "--lr", "0.1")
    assert {path.name: path.read_bytes() for path in honest.iterdir() if path.is_file()} == summary
    assert "seed-8 holds the run of seed 7, not 8" in refused(study_folder("misfiled", "seed7", "seed7_again"))
    other = study_folder("other_lr", "seed7", "seed8")
    config = json.loads((other / "seed-8" / "config.json").read_text())
    (other / "seed-8" / "config.json").write_text(json.dumps({**config, "lr": config["lr"] * 2}))
    assert re.search(r"the runs of seeds 7 and 8 differ in more than the seed: .*\blr\b", refused(other))
    edited = study_folder("edited_by_hand", "seed7", "seed8")
    (edited / "seed-8" / "config.json").write_text(json.dumps({**config, "lr": "fast"}))
    assert f"{Path('seed-8', 'config.json')}: its lr is 'fast', which is not a number" in refused(edited)


def test_summarise_heads_its_table_with_the_figure_metric_names_and_refuses_one_the_runs_lack(runs, tmp_path, capsys):
    for seed, run in (("7", "seed7"), ("8", "seed8")):
        shutil.copytree(runs[run].path, tmp_path / f"seed-{seed}")
    for name in runs["seed7"].metric_names:  # every figure the runs record, the loss and the task's
        assert study.main(["--seeds", "7,8", "--out", str(tmp_path), "--summarise", "--metric", name]) == 0
        assert json.loads((tmp_path / "study.json").read_text())["headline"] == f"val_{name}"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        study.main(["--seeds", "7,8", "--out", str(tmp_path), "--summarise", "--metric", "no_such_figure"])
    recorded = ", ".join(runs["seed7"].metric_names)
    assert exit_info.value.code == 2
    assert f"--metric no_such_figure: the runs record {recorded}" in capsys.readouterr().err


@pytest.mark.parametrize("left", [(), ("config.json",), ("config.json", "environment.json", "metrics.csv")],
                         ids=["nothing", "its config", "its first rows"])
def test_a_seed_stopped_before_its_first_checkpoint_is_started_again_over_what_it_left(left, tmp_path):
    """A kill can land before a seed's first checkpoint: running the study again starts that seed
    afresh, with train told to overwrite what it left (a new run refuses a folder holding one)."""
    run = tmp_path / "seed-3"
    run.mkdir()
    for name in left:
        (run / name).write_text("{}")
    action, args = study.command_for(3, tmp_path, list(FLAGS))
    parsed = build_parser().parse_args(args)
    assert action == "started" and (parsed.seed, parsed.out) == (3, run)
    assert out_dir_refusal(parsed.out, parsed.overwrite) is None


# Imported first by every Python process the study starts (sitecustomize, from PYTHONPATH): a
# training child, once its first step is done, waits until two signals have reached it (the
# terminal's Ctrl-C and the study's), then goes on. So both arrive while the run is still in its
# step, however fast the run or loaded the machine: the moment where taking them as two Ctrl-Cs
# would end the run without a checkpoint.
HOLD_FOR_TWO_SIGNALS = """
import os, sys
if "-m" in sys.orig_argv and "PACKAGE.train" in sys.orig_argv:
    import signal, time
    from pathlib import Path
    from PACKAGE.engine.loop import StepRows
    from PACKAGE.engine.signals import PASSED_ON
    add, arrived = StepRows.add, []

    def add_then_hold(rows, epoch, at_step, *rest):
        add(rows, epoch, at_step, *rest)
        if at_step != 1:
            return
        handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, PASSED_ON)}
        def noted(signum, frame):
            arrived.append(signum)
            handlers[signum](signum, frame)
        for signum in handlers:
            signal.signal(signum, noted)
        Path(os.environ["HELD_MARKER"]).write_text("held")
        while len(arrived) < 2:
            time.sleep(0.01)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)

    StepRows.add = add_then_hold
"""


@pytest.mark.skipif(PASSED_ON is None, reason="real-time signals are Linux's")
def test_one_ctrl_c_in_a_terminal_stops_the_study_and_its_running_seed_with_a_checkpoint(tmp_path):
    """A terminal sends Ctrl-C to the whole process group: the study and its training child each
    get one SIGINT. The study passes the stop on as well (for a SIGINT sent to it alone); the child
    must take the two as one request (stop after its step, with a checkpoint), not as the second
    Ctrl-C that means "now, without one". The study then says so in one line, exit 130."""
    out, marker = tmp_path / "study", tmp_path / "held"
    (tmp_path / "hold").mkdir()
    (tmp_path / "hold" / "sitecustomize.py").write_text(HOLD_FOR_TWO_SIGNALS.replace("PACKAGE", PACKAGE))
    env = python_env(HELD_MARKER=str(marker))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hold"), env["PYTHONPATH"]])
    process = start([sys.executable, "-m", f"{PACKAGE}.study", "--seeds", "0", *FLAGS, "--out", str(out)],
                    tmp_path / "study.log", env=env)
    wait_until(marker.exists, process, "its seed's first step")
    process.kill_group(signal.SIGINT)  # the group, as a terminal does
    assert process.wait() == 130, process.stderr[-3000:]
    assert process.stderr.strip().splitlines()[-1].startswith(f"python -m {PACKAGE}.study: stopped (SIGINT): ")
    seed_log = (out / "logs" / "seed-0.log").read_text()
    assert "again: exiting now" not in seed_log and "SIGINT: stopped after step 1," in seed_log, seed_log[-2000:]
    assert (out / "seed-0" / "checkpoints" / "step-00000001.pt").exists()
    assert "Traceback" not in process.stderr + seed_log


def test_with_early_stop_the_watched_figure_is_a_result_setting_of_the_study(tmp_path, capsys):
    """--keep-best is an execution setting (a study goes on under another), but with --early-stop it
    decides where each run ends: then the study refuses to go on under another."""
    shared = {**study_with_one_setting_changed(tmp_path, "keep_best")[0], "keep_best": "min:loss", "early_stop": 2}
    (tmp_path / "study.json").write_text(json.dumps({"config": shared, "seeds": [0], "runs": None}))
    with pytest.raises(SystemExit) as exit_info:
        study.check_study_folder(tmp_path, {**shared, "keep_best": "max:loss"})
    assert exit_info.value.code == 2 and "keep_best: 'min:loss' -> 'max:loss'" in capsys.readouterr().err
    assert study.check_study_folder(tmp_path, {**shared, "log_every": 7})["config"] == shared  # the control


def test_a_study_from_given_weights_records_their_hash_as_each_run_does(tmp_path):
    """study.json's shared settings hold --init-from's weights_sha256, as train's plan computes it
    for each seed's config.json (a study recorded "" before, and each run the hash)."""
    from {{ cookiecutter.project_slug }}.engine.plan import init_weights_sha256

    train_set, _ = task.make_datasets(study.Config())
    torch.save(task.make_model(study.Config(), train_set).state_dict(), tmp_path / "start.pt")
    config = study.Config(init_from=str(tmp_path / "start.pt"))
    assert study.shared_settings(config)["init_from_sha256"] == init_weights_sha256(config.init_from) != ""
    assert study.shared_settings(study.Config())["init_from_sha256"] == ""


def test_a_study_with_a_config_file_records_the_files_settings_and_gives_each_seed_its_own(tmp_path):
    """--config FILE is passed to each seed's train, whose typed --seed overrides the file's; the
    study's own record (study.json's shared settings, which a later launch is checked against)
    holds the file's settings too, not the defaults."""
    (tmp_path / "experiment.toml").write_text("lr = 0.07\nseed = 9\nweight-decay = 0.0\n")
    out = tmp_path / "study"
    process = start([sys.executable, "-m", f"{PACKAGE}.study", "--seeds", "0", *FLAGS, "--config",
                     str(tmp_path / "experiment.toml"), "--out", str(out)], tmp_path / "study.log")
    assert process.wait() == 0, process.stderr[-3000:]
    run, recorded = read_run(out / "seed-0"), json.loads((out / "study.json").read_text())["config"]
    assert (run.config["lr"], run.config["weight_decay"], run.config["seed"]) == (0.07, 0.0, 0)
    assert recorded == {name: value for name, value in run.config.items() if name != "seed"}
    # The control: the refusal of a study that goes on with other result settings reads the file too.
    (tmp_path / "experiment.toml").write_text("lr = 0.08\n")
    with pytest.raises(SystemExit) as ended:
        study.main(["--seeds", "0", *FLAGS, "--config", str(tmp_path / "experiment.toml"), "--out", str(out)])
    assert ended.value.code == 2


@pytest.mark.parametrize("jobs", ["0", "-1"])
def test_jobs_below_one_is_refused_in_one_line_before_anything_runs(jobs, tmp_path, capsys, monkeypatch):
    """--jobs 0 would start no seed and wait for one for ever (here, let through, it fails at once)."""
    monkeypatch.setattr(study, "run_seeds", lambda *args: pytest.fail(f"--jobs {jobs} was let through to run_seeds"))
    with pytest.raises(SystemExit) as exit_info:
        study.main(["--seeds", "0", *FLAGS, "--jobs", jobs, "--out", str(tmp_path / "s")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--jobs must be at least 1, not {jobs}" in err[0]
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("out", ["/proc/study", "/sys/study"])
def test_a_study_folder_that_cannot_be_written_gets_one_line_and_exit_2(out, capsys):
    with pytest.raises(SystemExit) as exit_info:
        study.main(["--seeds", "0", "--out", out])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {out}: cannot write there" in err[0]


def test_the_confidence_interval_is_students_t():
    stats = statistics_of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert stats["mean"] == 3.0 and math.isclose(stats["std"], math.sqrt(2.5))
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, 4 degrees of freedom) = 2.776
    assert stats["ci95"] == pytest.approx([3.0 - half, 3.0 + half])
    assert statistics_of([1.0])["ci95"] is None


def test_one_seed_has_a_mean_and_no_spread_and_two_seeds_have_both():
    assert statistics_of([0.25]) == {"mean": 0.25, "std": None, "ci95": None}
    two = statistics_of([1.0, 3.0])  # the smallest study with a spread: one degree of freedom
    std, n = math.sqrt(2.0), 2  # sqrt(((1 - 2)**2 + (3 - 2)**2) / (n - 1))
    half = 12.706 * std / math.sqrt(n)  # t(0.975, 1 degree of freedom) = 12.706
    assert two["mean"] == 2.0 and two["std"] == pytest.approx(std)
    assert two["ci95"] == pytest.approx([2.0 - half, 2.0 + half])


@pytest.mark.parametrize(("degrees", "t"), [(1, 12.706), (2, 4.303), (30, 2.042), (31, 2.042), (39, 2.042),
                                            (40, 2.021), (59, 2.021), (60, 2.000), (120, 1.980), (121, 1.960),
                                            (10_000, 1.960)])
def test_students_t_is_the_tables_row_at_or_below_the_degrees_and_the_normal_value_beyond_120(degrees, t):
    # Between two rows of the table the lower one is taken: a wider interval, never an overclaim.
    assert t_975(degrees) == t


def without_timings(study_json: dict) -> dict:
    runs = [{k: v for k, v in row.items() if k != "train_seconds"} for row in study_json["runs"]]
    return {**{k: v for k, v in study_json.items() if k != "study_seconds"}, "runs": runs}


def studies(root):
    """A study run through, and the same study killed (with its runs) during seed 1, then re-run."""
    command = [sys.executable, "-m", f"{PACKAGE}.study", "--seeds", "0-2", *FLAGS]
    whole = start([*command, "--out", str(root / "whole"), "--jobs", "2"], root / "whole.log")
    killed = start([*command, "--out", str(root / "killed")], root / "killed.log")
    seed_1 = root / "killed" / "seed-1" / "checkpoints"
    wait_until(lambda: any(seed_1.glob("step-0000000[4-9].pt")), killed, "seed 1 had a checkpoint")
    killed.kill_group(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL
    rerun = start([*command, "--out", str(root / "killed")], root / "rerun.log")
    for name, process in (("whole", whole), ("rerun", rerun)):
        assert process.wait() == 0, f"{name}: {process.stderr[-3000:]}"
    return {"whole": whole, "rerun": rerun, "root": root}


@pytest.fixture(scope="module")
def studies_or_failure(tmp_path_factory):
    return once(lambda: studies(tmp_path_factory.mktemp("studies")))


@pytest.fixture
def ran(studies_or_failure, request):
    return value_of(studies_or_failure, request)


@pytest.mark.slow
def test_a_study_writes_study_json_csv_png_and_prints_a_table(ran):
    root = ran["root"]
    summary = json.loads((root / "whole" / "study.json").read_text())
    assert summary["seeds"] == [0, 1, 2] and [row["seed"] for row in summary["runs"]] == [0, 1, 2]
    assert summary["headline"] == HEADLINE
    for name in (f"val_{name}" for name in read_run(root / "whole" / "seed-0").metric_names):  # every figure
        assert summary["statistics"][name] == statistics_of([row[name] for row in summary["runs"]])
    assert len(set(row["weights_sha256"] for row in summary["runs"])) == 3  # three seeds, three results
    csv_rows = (root / "whole" / "study.csv").read_text().splitlines()
    assert csv_rows[0].startswith("seed,weights_sha256,val_loss,") and len(csv_rows) == 4
    assert (root / "whole" / "study.png").read_bytes().startswith(b"\x89PNG")
    printed = ran["whole"].stdout
    assert HEADLINE in printed and "mean" in printed and summary["runs"][0]["weights_sha256"][:12] in printed
    assert "95 % confidence interval" in printed
    for seed in range(3):  # one line per finished seed: its time and headline figure
        assert re.search(rf"^seed {seed}: finished in [0-9.]+ s, {HEADLINE} [0-9.]+$", printed, re.MULTILINE)
    assert printed.strip().splitlines()[-1] == "wrote " + ", ".join(
        str(root / "whole" / name) for name in ("study.json", "study.csv", "study.png"))


@pytest.mark.slow
def test_summarise_makes_the_same_study_from_seed_folders_trained_elsewhere(ran, tmp_path, capsys):
    """As after a SLURM array: the seed folders exist, the study only summarises them."""
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    for seed in range(3):
        shutil.copytree(ran["root"] / "whole" / f"seed-{seed}", copy / f"seed-{seed}")
    assert study.main(["--seeds", "0-2", "--out", str(copy), "--summarise"]) == 0
    made, trained = (json.loads((folder / "study.json").read_text()) for folder in (copy, ran["root"] / "whole"))
    assert without_timings(made) == without_timings(trained)
    (copy / "seed-2" / "summary.json").unlink()
    with pytest.raises(SystemExit) as exit_info:
        study.main(["--seeds", "0-2", "--out", str(copy), "--summarise"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "seed 2" in err and "has not finished" in err


@pytest.mark.slow
def test_seeds_that_cannot_be_drawn_as_one_leave_no_picture_and_say_why_in_a_line(ran, tmp_path, monkeypatch,
                                                                                  capsys):
    """--early-stop ends the seeds at other steps, which plot's study_series refuses to draw as one
    (a RunError, made here): the study still writes study.json and study.csv, says why there is no
    study.png, and exits 0, not with a traceback."""
    from {{ cookiecutter.project_slug }} import plot
    from {{ cookiecutter.project_slug }}.engine.runs import RunError

    copy = tmp_path / "elsewhere"
    copy.mkdir()
    for seed in range(2):
        shutil.copytree(ran["root"] / "whole" / f"seed-{seed}", copy / f"seed-{seed}")

    def refuses(folder):
        raise RunError(f"the runs of {folder} have different steps")

    monkeypatch.setattr(plot, "study_series", refuses)
    assert study.main(["--seeds", "0-1", "--out", str(copy), "--summarise"]) == 0
    assert f"no study.png: the runs of {copy} have different steps" in capsys.readouterr().out
    assert (copy / "study.json").exists() and (copy / "study.csv").exists() and not (copy / "study.png").exists()


@pytest.mark.slow
def test_each_seed_is_an_ordinary_run_and_all_share_the_data_seed(ran, capsys):
    runs = [read_run(ran["root"] / "whole" / f"seed-{seed}") for seed in range(3)]
    assert [run.config["seed"] for run in runs] == [0, 1, 2]
    assert len({run.config["data_seed"] for run in runs}) == 1  # scored on the same validation samples
    assert compare.main([str(runs[0].path), str(runs[1].path)]) == 1  # compare reads them
    assert "seed: 0 -> 1" in capsys.readouterr().out


@pytest.mark.slow
def test_a_study_killed_and_run_again_ends_with_the_study_json_of_one_never_interrupted(ran):
    root = ran["root"]
    whole, rerun = (json.loads((root / name / "study.json").read_text()) for name in ("whole", "killed"))
    assert without_timings(rerun) == without_timings(whole)
    assert "seed 0: kept" in ran["rerun"].stdout and "seed 1: resumed" in ran["rerun"].stdout
    assert "seed 2: started" in ran["rerun"].stdout
