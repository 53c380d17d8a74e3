"""Specifications of the tools users run when a rerun differs: verify, compare, doctor."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from {{ cookiecutter.project_slug }} import compare, doctor, verify
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.environment import ENVIRONMENT_KEYS, environment_changes
from {{ cookiecutter.project_slug }}.engine.runs import read_run

from conftest import SetUpFailure, determinism_left_as_found, once, value_of


def tampered_copy(run, folder, step: int, split: str = "train", name: str = "loss"):
    """A copy of a run whose metrics.csv has one figure changed in its last bits: the row of
    `step` and `split`, the column of figure `name` (the loss, or one of the task's metrics)."""
    copy = shutil.copytree(run.path, folder / f"tampered-{split}-{step}-{name}")
    lines = (copy / "metrics.csv").read_text().splitlines(keepends=True)
    column = lines[0].rstrip("\n").split(",").index(name)
    [number] = [i for i, line in enumerate(lines) if line.split(",")[1:3] == [str(step), split]]
    fields = lines[number].rstrip("\n").split(",")
    fields[column] = repr(float(fields[column]) * (1 + 1e-6) + 1e-12)
    lines[number] = ",".join(fields) + "\n"
    (copy / "metrics.csv").write_text("".join(lines))
    return copy


def files(folder) -> dict:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def tools_ran_or_failure(all_runs, tmp_path_factory):
    failed = [all_runs[name] for name in ("seed7", "seed7_threads2") if isinstance(all_runs[name], SetUpFailure)]
    return failed[0] if failed else once(lambda: run_tools(all_runs, tmp_path_factory))


@pytest.fixture
def tools_ran(tools_ran_or_failure, request):
    return value_of(tools_ran_or_failure, request)


def run_tools(runs, tmp_path_factory):
    """The checks that train in fresh processes, all at once: verify on an honest run and on a
    tampered copy (in threads), and doctor. Returns each one's (exit status, output)."""
    honest = runs["seed7_threads2"]
    before = files(honest.path)
    copy = tampered_copy(runs["seed7"], tmp_path_factory.mktemp("tampered"), step=3)
    with ThreadPoolExecutor(max_workers=2) as pool:
        verifying = {"verify_honest": pool.submit(verify.verify, read_run(honest.path)),
                     "verify_tampered": pool.submit(verify.verify, read_run(copy), 4)}
        with determinism_left_as_found(), contextlib.redirect_stdout(io.StringIO()) as doctor_output:
            results = {"doctor": (doctor.main(["--steps", "3"]), doctor_output.getvalue())}
        for name, future in verifying.items():
            code, lines = future.result()
            results[name] = (code, "\n".join(lines))
    assert files(honest.path) == before  # verify never touches the run it checks
    return results


def test_verify_reproduces_an_honest_run(tools_ran, runs):
    returncode, out = tools_ran["verify_honest"]
    assert returncode == 0, out
    assert f"REPRODUCED weights_sha256 {runs['seed7_threads2'].weights}" in out
    assert "environment: the same" in out


def test_verify_names_the_step_where_a_tampered_run_diverges(tools_ran):
    returncode, out = tools_ran["verify_tampered"]
    assert returncode == 1, out
    assert "DIVERGED at step 3 (train), loss:" in out


def test_verify_finds_a_changed_validation_row_even_when_the_weights_hash_is_the_same(runs, tmp_path):
    """The negative control for the last rows: a run whose final evaluation was tampered with
    keeps its weights hash; verify must still say DIVERGED (no need to re-run to know it)."""
    run = runs["seed7"]
    last_step = run.summary["steps"]
    copy = tampered_copy(run, tmp_path, last_step, split="val", name=run.metric_names[-1])
    code, lines = verify.report(read_run(copy), run.config, run, None, [])
    assert code == 1 and lines[-1].startswith(f"DIVERGED at step {last_step} (val), {run.metric_names[-1]}:")


def test_compare_calls_a_copy_with_one_changed_validation_figure_different(runs, tmp_path, capsys):
    run = runs["seed7"]
    copy = tampered_copy(run, tmp_path, run.summary["steps"], split="val", name=run.metric_names[-1])
    assert compare.main([str(run.path), str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"first divergence: step {run.summary['steps']} (val)" in out and out.strip().endswith("DIFFERENT")


def test_verify_takes_steps_up_to_and_including_the_runs_last(runs, monkeypatch, capsys):
    run = runs["seed7_threads2"]
    asked = []
    monkeypatch.setattr(verify, "verify",
                        lambda original, steps, keep, world_size: asked.append(steps) or (0, ["REPRODUCED"]))
    assert verify.main([str(run.path), "--steps", str(run.summary["steps"])]) == 0
    assert asked == [run.summary["steps"]]


def test_verify_refuses_an_unfinished_run_whole_in_one_line_and_takes_its_first_steps(runs, tmp_path, monkeypatch,
                                                                                        capsys):
    """A run that did not finish has no final weights to compare: `verify RUN` says so and points to
    --steps N, which verifies the steps it did record."""
    unfinished = shutil.copytree(runs["seed7"].path, tmp_path / "unfinished")
    (unfinished / "summary.json").unlink()  # as a run leaves its folder until it finishes
    (unfinished / "model.pt").unlink()
    asked = []
    monkeypatch.setattr(verify, "verify",
                        lambda original, steps, keep, world_size: asked.append(steps) or (0, ["REPRODUCED"]))
    with pytest.raises(SystemExit) as exit_info:
        verify.main([str(unfinished)])
    assert exit_info.value.code == 2 and asked == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("did not finish (no summary.json); verify its first steps with --steps N")
    assert verify.main([str(unfinished), "--steps", "2"]) == 0 and asked == [2]


def test_verify_never_claims_steps_that_the_run_does_not_have(runs, capsys):
    run = runs["seed7_threads2"]  # one epoch
    with pytest.raises(SystemExit) as exit_info:
        verify.main([str(run.path), "--steps", "99999"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--steps 99999" in err and f"recorded {run.summary['steps']} steps" in err and "REPRODUCED" not in err


@pytest.mark.parametrize("key", ENVIRONMENT_KEYS)
def test_verify_compare_and_a_resume_each_name_any_entry_of_the_environment_that_differs(key, runs, tmp_path):
    """Every entry that bitwise equality depends on, one at a time: as verify's re-run, compare's
    second run and a resume's process would see it."""
    original = runs["seed7"]
    copy = shutil.copytree(original.path, tmp_path / "copy")
    (copy / "environment.json").write_text(json.dumps({**original.environment, key: "elsewhere"}))
    elsewhere = read_run(copy)
    code, lines = verify.report(original, original.config, elsewhere, None, [])
    assert "environment differs, so PyTorch does not promise bitwise equality:" in lines
    assert [line.split(":")[0].strip() for line in lines if line.startswith("  ")] == [key]
    assert [line.split(":")[0] for line in compare.environment_lines(original, elsewhere, original.config,
                                                                      original.config)] == [key]
    assert [line.split(":")[0] for line in environment_changes(copy, original.environment)] == [key]


def test_compare_says_identical_only_when_nothing_that_matters_differs(runs, tmp_path, capsys):
    """A config that differs in a result setting is never IDENTICAL, even with equal metrics."""
    copy = shutil.copytree(runs["seed7"].path, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    config["lr"] *= 10  # whatever the default was: the copy now claims another learning rate
    (copy / "config.json").write_text(json.dumps(config))
    assert compare.main([str(runs["seed7"].path), str(copy)]) == 1
    out = capsys.readouterr().out
    assert "lr: " in out and "first divergence: none" in out and "DIFFERENT" in out


def test_compare_says_different_when_only_the_world_size_history_differs(runs, tmp_path, capsys):
    """A copy that claims it went on with two processes from step 4: equal rows and weights, still
    not the run that never changed (world_sizes.json)."""
    copy = shutil.copytree(runs["seed7"].path, tmp_path / "copy")
    (copy / "world_sizes.json").write_text(json.dumps({"world_sizes": [
        {"step": 0, "world_size": 1}, {"step": 4, "epoch": 0, "epoch_step": 4, "world_size": 2}]}))
    assert compare.main([str(runs["seed7"].path), str(copy)]) == 1
    out = capsys.readouterr().out
    assert "then 2 from step 4" in out and out.strip().endswith("DIFFERENT")


def test_compare_finds_identical_runs_identical(runs, capsys):
    assert compare.main([str(runs["seed7"].path), str(runs["seed7_again"].path)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out


def test_compare_finds_runs_that_differ_only_in_how_they_executed_identical(runs, capsys):
    """Workers and prefetching change no result: listed as config differences, still IDENTICAL."""
    assert compare.main([str(runs["seed7"].path), str(runs["seed7_workers2_persistent"].path)]) == 0
    out = capsys.readouterr().out
    assert "num_workers: 0 -> 2" in out and out.strip().endswith("IDENTICAL")


def test_compare_takes_a_setting_a_run_did_not_record_as_its_default(runs, tmp_path, capsys):
    """A run older than a setting (its config.json lacks it) trained with that setting's default:
    against the same run that recorded it, no config difference, and IDENTICAL."""
    older = shutil.copytree(runs["seed7"].path, tmp_path / "older")
    config = json.loads((older / "config.json").read_text(encoding="utf-8"))
    defaults = Config().to_dict()
    unrecorded = next(name for name, value in config.items() if name in defaults and value == defaults[name])
    del config[unrecorded]
    (older / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert compare.main([str(runs["seed7"].path), str(older)]) == 0
    out = capsys.readouterr().out
    assert f"{unrecorded}:" not in out and out.strip().endswith("IDENTICAL"), (unrecorded, out)


def test_compare_finds_a_log_cut_short_different(runs, tmp_path, capsys):
    copy = shutil.copytree(runs["seed7"].path, tmp_path / "short")
    lines = (copy / "metrics.csv").read_text().splitlines(keepends=True)
    (copy / "metrics.csv").write_text("".join(lines[:-3]))  # as if the last rows were lost
    assert compare.main([str(runs["seed7"].path), str(copy)]) == 1
    assert f"one log has {len(lines) - 1} rows, the other {len(lines) - 4}" in capsys.readouterr().out


def test_compare_never_calls_two_unfinished_runs_identical_for_their_rows_alone(runs, tmp_path, capsys):
    """IDENTICAL needs the weights' hash too: two runs stopped before the end have none to compare."""
    copies = [shutil.copytree(runs["seed7"].path, tmp_path / name) for name in ("a", "b")]
    for copy in copies:  # as a run leaves its folder until it finishes
        (copy / "model.pt").unlink()
        (copy / "summary.json").unlink()
    assert compare.main([str(copy) for copy in copies]) == 1
    out = capsys.readouterr().out
    assert "(unfinished)" in out and out.strip().splitlines()[-1] == "DIFFERENT"


def test_verify_finds_other_final_weights_even_when_every_row_is_equal(runs, tmp_path):
    run = runs["seed7"]
    copy = shutil.copytree(run.path, tmp_path / "other-weights")
    summary = json.loads((copy / "summary.json").read_text())
    summary["weights_sha256"] = "0" * 64
    (copy / "summary.json").write_text(json.dumps(summary))
    code, lines = verify.report(read_run(copy), run.config, run, None, [])
    assert code == 1 and lines[-1] == f"DIVERGED at final weights: {'0' * 64} vs {run.weights} (recorded vs re-run)"


def test_compare_lists_the_seed_and_the_first_divergence_of_different_runs(runs, capsys):
    assert compare.main([str(runs["seed7"].path), str(runs["seed8"].path)]) == 1
    out = capsys.readouterr().out
    assert "seed: 7 -> 8" in out
    assert "first divergence: step 1 (train), loss:" in out
    assert runs["seed7"].weights[:22] in out and runs["seed8"].weights[:22] in out
    assert "DIFFERENT" in out


def test_compare_names_an_environment_entry_that_follows_from_a_differing_setting_without_advice(runs, capsys):
    """--seed also sets the hash seed: advice on how to set it would send the user looking for a
    mistake that was not made."""
    compare.main([str(runs["seed7"].path), str(runs["seed8"].path)])
    out = capsys.readouterr().out
    assert runs["seed7"].environment["python_hash_seed"] != runs["seed8"].environment["python_hash_seed"]
    assert "python_hash_seed: " in out and "follows from --seed, which differs" in out
    assert "start training as" not in out


def test_compare_names_runs_that_differ_only_in_their_evaluations_so(runs, capsys):
    """--eval-every 0 evaluates only at the end: other val rows, the same training and weights."""
    never = runs["seed7_workers3_eval_never"]
    assert compare.main([str(runs["seed7"].path), str(never.path)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT evaluations only: the weights and every training row are identical; --eval-every" in out
    assert compare.main([str(runs["seed7"].path), str(runs["seed8"].path)]) == 1  # the negative control
    assert "evaluations only" not in capsys.readouterr().out


def test_compare_writes_a_png_of_both_loss_curves(runs, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib (in the dev extra)")
    png = tmp_path / "losses.png"
    compare.main([str(runs["seed7"].path), str(runs["seed8"].path), "--plot", str(png)])
    assert png.read_bytes().startswith(b"\x89PNG")
    assert f"curves written to {png}" in capsys.readouterr().out


def test_compare_without_matplotlib_says_how_to_get_a_plot(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    png = tmp_path / "losses.png"
    compare.main([str(runs["seed7"].path), str(runs["seed8"].path), "--plot", str(png)])
    assert not png.exists()
    assert "pip install matplotlib" in capsys.readouterr().out


def bad_run_folders(tmp_path, good):
    """Each kind of bad input, as a folder, with a piece of the message it must get."""
    empty = tmp_path / "empty"
    empty.mkdir()
    bad_config = shutil.copytree(good, tmp_path / "bad_config")
    (bad_config / "config.json").write_text("{not json")
    bad_metrics = shutil.copytree(good, tmp_path / "bad_metrics")
    (bad_metrics / "metrics.csv").write_text("epoch,step,split,lr,loss\n0,1,train,0.1,oops\n")
    no_hash = shutil.copytree(good, tmp_path / "no_hash")
    summary = json.loads((no_hash / "summary.json").read_text())
    (no_hash / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "weights_sha256"}))
    bad_history = shutil.copytree(good, tmp_path / "bad_history")
    (bad_history / "world_sizes.json").write_text(json.dumps({"world_sizes": 3}))
    return {
        "missing folder": (tmp_path / "missing", "does not exist"),
        "no run in it": (empty, "holds no run"),
        "corrupt config.json": (bad_config, "config.json is corrupt"),
        "corrupt metrics.csv": (bad_metrics, "metrics.csv is corrupt (line 2"),
        "summary without its hash": (no_hash, "summary.json is corrupt (no weights_sha256)"),
        "corrupt world_sizes.json": (bad_history, "world_sizes.json is corrupt"),
    }


@pytest.mark.parametrize("tool", [verify, compare])
def test_bad_run_folders_get_one_clear_line_and_exit_2(tool, runs, tmp_path, capsys):
    for name, (folder, message) in bad_run_folders(tmp_path, runs["seed7"].path).items():
        argv = [str(folder)] if tool is verify else [str(folder), str(runs["seed7"].path)]
        with pytest.raises(SystemExit) as exit_info:
            tool.main(argv)
        assert exit_info.value.code == 2, name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and message in err, f"{name}: {err}"


def test_doctor_passes_on_this_machine(tools_ran):
    returncode, out = tools_ran["doctor"]
    assert returncode == 0, out
    assert "two trial runs of 3 steps in fresh processes, with the defaults" in out
    assert "VERDICT: OK" in out


def test_doctor_given_a_run_trials_that_runs_settings_not_the_defaults(runs, monkeypatch, capsys):
    """The trials must train what the run trained (its batch, model, precision...): a run whose
    settings do not repeat here would pass a check of the defaults."""
    from {{ cookiecutter.project_slug }}.config import Config, parse_command_line

    launched, launch = [], doctor.launch_training
    monkeypatch.setattr(doctor, "launch_training",
                        lambda *args, **kwargs: launched.append(args) or launch(*args, **kwargs))
    run = runs["seed7"]
    with determinism_left_as_found():
        assert doctor.main([str(run.path), "--steps", "2"]) == 0
    assert f"two trial runs of 2 steps in fresh processes, with the settings of {run.path}" in capsys.readouterr().out
    assert len(launched) == 2
    for argv in launched:
        typed, args = parse_command_line(list(argv))  # as train reads them
        trial = Config(**{**Config().to_dict(), **typed}).to_dict()
        assert {name: value for name, value in trial.items() if name not in ("checkpoint_every", "world_size")} == \
            {name: value for name, value in run.config.items() if name not in ("checkpoint_every", "world_size")}
        assert args.stop_after_steps == 2


@pytest.mark.parametrize("typed, runs_mode, checked", [
    ("off", "strict", "off"), ("warn", None, "warn"), (None, "warn", "warn"), (None, None, "the default")])
def test_doctor_checks_the_mode_typed_first_then_the_runs_then_the_projects_default(typed, runs_mode, checked):
    from types import SimpleNamespace

    from {{ cookiecutter.project_slug }}.config import Config

    run = None if runs_mode is None else SimpleNamespace(config={"deterministic": runs_mode})
    assert doctor.mode_to_check(typed, run) == (Config().deterministic if checked == "the default" else checked)


@pytest.mark.parametrize("mode", ["off", "warn", "strict"])
def test_doctor_trials_a_runs_settings_in_the_mode_it_checks_not_the_mode_the_run_recorded(mode, runs):
    """train's parser keeps the last of a repeated flag: the mode checked must come after the run's."""
    import dataclasses

    from {{ cookiecutter.project_slug }}.config import parse_command_line

    recorded = "strict" if mode != "strict" else "off"
    run = dataclasses.replace(runs["seed7"], config={**runs["seed7"].config, "deterministic": recorded})
    _, args = parse_command_line(doctor.trial_flags(run, mode, "cpu", 3))
    assert (args.deterministic, args.stop_after_steps, args.seed) == (mode, 3, run.config["seed"])


def test_doctor_quick_does_not_claim_that_runs_repeat(capsys):
    doctor.main(["--quick"])
    out = capsys.readouterr().out
    assert "repeat bit for bit here with these settings" not in out and "--quick: no trial runs" in out


def test_doctor_explains_the_ops_strict_mode_refuses_here(capsys):
    doctor.main(["--quick", "--deterministic", "strict"])
    out = capsys.readouterr().out
    assert "max_unpool2d: the op" in out and "--deterministic warn" in out


def test_doctor_reports_an_environment_variable_set_too_late(monkeypatch, capsys):
    initial = (doctor.initial_environment() or {}).get("PYTHONHASHSEED")
    monkeypatch.setenv("PYTHONHASHSEED", "1" if initial != "1" else "2")  # as the popular snippets do
    assert doctor.main(["--quick"]) == 1
    out = capsys.readouterr().out
    assert "PYTHONHASHSEED was set" in out and "after Python started" in out
    assert "VERDICT: 1 problem" in out


def test_doctor_warns_when_tf32_is_allowed_in_a_determinism_mode(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "configure_determinism", lambda mode: None)  # as if a script forgot it
    assert doctor.main(["--quick", "--deterministic", "strict"]) == 1
    out = capsys.readouterr().out
    assert "TF32 is allowed" in out and "depend on the GPU model" in out


def test_doctor_says_so_when_its_two_trial_runs_differ(monkeypatch, capsys):
    """The case doctor exists for: two runs with one seed that differ on this machine. Its real
    trials and fingerprints, with the second trial made another seed's run (a machine whose runs
    wander gives such a pair): doctor compares what they wrote, and says so."""
    real_trial_run, trials = doctor.trial_run, []

    def second_trial_of_another_seed(out, flags, run):
        trials.append(out)
        return real_trial_run(out, [*flags, "--seed", "8"] if len(trials) == 2 else flags, run)  # the last wins

    monkeypatch.setattr(doctor, "trial_run", second_trial_of_another_seed)
    with determinism_left_as_found():
        assert doctor.main(["--steps", "2"]) == 1
    out = capsys.readouterr().out
    assert len(trials) == 2 and "two runs with one seed gave different results on this machine" in out
    assert "VERDICT: 1 problem" in out


@pytest.mark.parametrize("steps", ["0", str(2**63)])
def test_doctor_refuses_steps_its_trial_runs_cannot_take_with_one_line(steps, capsys):
    """Not a trial run that fails on them, which doctor would report as a problem of the machine."""
    with pytest.raises(SystemExit) as exit_info:
        doctor.main(["--steps", steps])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and f"argument --steps: {steps} is not " in line, line


def test_doctor_reports_cuda_initialised_too_early(monkeypatch, capsys):
    monkeypatch.setattr(doctor.torch.cuda, "is_initialized", lambda: True)
    assert any("CUDA is already initialised" in p for p in doctor.late_environment_problems())
