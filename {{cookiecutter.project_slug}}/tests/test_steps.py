"""Specifications of a run's length in optimizer steps (--max-steps), evaluation in the middle of
epochs on a fixed few batches (--eval-every-steps, --eval-batches) and early stopping
(--early-stop): each checked against what the test computes itself from the run's own record, each
resumed exactly, and none changing a weight it should not.

Each run is a fresh process; P below is the steps of one FAST epoch of this project's task.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from {{ cookiecutter.project_slug }} import evaluate as evaluate_command
from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.cli import prog
from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer
from {{ cookiecutter.project_slug }}.engine.runs import Run, read_run
from {{ cookiecutter.project_slug }}.train import evaluation_samples

from conftest import BATCH, FAST, SAMPLES, once, python_env, start_module, steps_per_epoch, train_many, value_of

P = steps_per_epoch()
EVERY = 3  # --eval-every-steps
# --max-steps: the second epoch cut short one to three steps in, on a step where an evaluation is
# due (a multiple of EVERY), which the end of the run's own evaluation covers, as an epoch's end does.
LENGTH = P + EVERY - P % EVERY
# --max-steps replaces --epochs, which FAST sets: back to the default, which a length in steps allows.
MAX_STEPS = ("--epochs", str(Config.epochs), "--max-steps", str(LENGTH))
# Evaluations every EVERY steps on one batch of 8 validation samples; a checkpoint at each, so that
# each evaluation's row can be scored again from the weights of its step.
STEPWISE = (*MAX_STEPS, "--eval-every-steps", str(EVERY), "--eval-batches", "1",
            "--val-batch-size", "8", "--checkpoint-every", str(EVERY))
EARLY = ("--eval-every-steps", "2", "--early-stop", "2")


def train_and_resume(root, runs: dict, resumed: tuple[str, ...]) -> dict[str, Run]:
    """train_many's runs, then each run named in `resumed` (stopped by its --stop-after-steps)
    resumed in a fresh process and read again."""
    trained = train_many(root, runs)
    for name in resumed:
        process = start_module("train", "--out", str(root / name), "--resume", log=root / f"{name}-resume.log",
                               env=python_env())
        assert process.wait() == 0, process.stderr[-3000:]
        trained[name] = read_run(root / name)
    return trained


@pytest.fixture(scope="module")
def step_runs_or_failure(tmp_path_factory):
    runs = {
        "stepwise": (STEPWISE, {}),
        "max_steps_only": (MAX_STEPS, {}),
        # Stopped at step 6, where an evaluation and a checkpoint are both due, then resumed.
        "stepwise_resumed": ((*STEPWISE, "--stop-after-steps", str(2 * EVERY)), {}),
        # Stopped after the first epoch's last step, before its evaluation, then resumed.
        "max_steps_resumed": ((*MAX_STEPS, "--stop-after-steps", str(P)), {}),
        "early_max": ((*EARLY, "--keep-best", "max:loss"), {}),
        "early_min": ((*EARLY, "--keep-best", "min:loss"), {}),
    }
    resumed = ("stepwise_resumed", "max_steps_resumed")
    return once(lambda: train_and_resume(tmp_path_factory.mktemp("steps"), runs, resumed))


@pytest.fixture
def step_runs(step_runs_or_failure, request) -> dict[str, Run]:
    return value_of(step_runs_or_failure, request)


def rows(run: Run, split: str) -> list[dict]:
    return [row for row in run.metrics if row["split"] == split]


def test_max_steps_ends_the_run_after_that_many_steps_its_last_epoch_cut_short(step_runs):
    run = step_runs["max_steps_only"]
    assert run.summary["steps"] == LENGTH
    assert [int(row["step"]) for row in rows(run, "train")] == list(range(1, LENGTH + 1))
    assert [int(row["epoch"]) for row in rows(run, "train")] == [0] * P + [1] * (LENGTH - P)
    # Each epoch's end is evaluated: the whole first one, and the second where the steps ran out.
    assert [int(row["step"]) for row in rows(run, "val")] == [P, LENGTH]


def test_a_max_steps_run_stopped_at_an_epochs_last_step_resumes_exactly(step_runs):
    """Stopped after step P, before the epoch's evaluation: resumed, it evaluates the epoch, trains
    the steps left and ends as the run that never stopped."""
    resumed, whole = step_runs["max_steps_resumed"], step_runs["max_steps_only"]
    assert resumed.metrics == whole.metrics and resumed.weights == whole.weights


def test_the_schedule_spans_max_steps_not_the_epochs(step_runs):
    """The learning rate each step took, against the schedule made here for LENGTH steps; the
    control: a schedule for the two whole epochs gives other rates."""
    def rates(steps: int) -> list[str]:
        optimizer, scheduler = make_optimizer(torch.nn.Linear(1, 1), Config(), steps)
        taken = []
        for _ in range(LENGTH):
            taken.append(repr(float(optimizer.param_groups[0]["lr"])))
            optimizer.step()
            scheduler.step()
        return taken

    recorded = [row["lr"] for row in rows(step_runs["max_steps_only"], "train")]
    assert recorded == rates(LENGTH)
    assert recorded != rates(2 * P)


def test_evaluations_come_every_n_steps_and_at_each_epochs_end(step_runs):
    run = step_runs["stepwise"]
    expected = sorted({step for step in range(1, LENGTH + 1) if step % EVERY == 0} | {P, LENGTH})
    assert [int(row["step"]) for row in rows(run, "val")] == expected
    # metrics.csv stays in step order: an evaluation's row after the rows of the steps it follows.
    steps = [int(row["step"]) for row in run.metrics]
    assert steps == sorted(steps)
    out = (run.path.parent / "stepwise.out").read_text()  # train_many's log: a line per evaluation in an epoch
    assert out.count(f"/{LENGTH}  val_loss ") == len([step for step in expected if step % EVERY == 0
                                                      and step not in (P, LENGTH)])


def test_a_step_where_an_epoch_ends_on_an_evaluation_due_is_evaluated_once(step_runs):
    """An invariant of each run: one validation row a step at most, also where --eval-every-steps
    falls on an epoch's last step (the early-stop runs evaluate every 2 steps: each even epoch
    length ends on one) or on the run's last (the stepwise runs' LENGTH), which the epoch's own
    evaluation covers."""
    for name, run in step_runs.items():
        evaluated = [int(row["step"]) for row in rows(run, "val")]
        assert evaluated == sorted(set(evaluated)), f"{name}: a step evaluated twice in {evaluated}"
    if P % 2 == 0:  # the case arose: the early-stop runs' first epoch ended on an evaluation due
        assert P in [int(row["step"]) for row in rows(step_runs["early_min"], "val")]


def test_each_evaluation_scores_the_same_fixed_batches_the_weights_of_its_step(step_runs, tmp_path):
    """Each row whose step's checkpoint is still kept (the newest few are), scored again by
    `evaluate` from it: the same figures bit for bit, on the 8 samples --eval-batches chose, in the
    middle of an epoch and at its end alike."""
    run = step_runs["stepwise"]
    kept = {int(path.stem.removeprefix("step-")) for path in (run.path / "checkpoints").glob("step-*.pt")}
    scored = [row for row in rows(run, "val") if int(row["step"]) in kept]
    assert any(int(row["step"]) not in (P, LENGTH) for row in scored) and len(scored) >= 2, kept
    for row in scored:
        step = int(row["step"])
        weights = run.path / "checkpoints" / f"step-{step:08d}.pt"
        assert evaluate_command.main([str(run.path), "--weights", str(weights), "--json", str(tmp_path / "e.json")]) \
            == 0
        result = json.loads((tmp_path / "e.json").read_text())
        assert result["samples"] == 8 and result["step"] == step
        assert {name: repr(value) for name, value in result["figures"].items()} == \
            {name: row[name] for name in run.metric_names}, step


def test_the_fixed_batches_are_a_draw_of_the_data_seed_the_same_every_time():
    _, val_set = task.make_datasets(Config())
    config = Config(eval_batches=2, val_batch_size=min(8, len(val_set) // 4))
    chosen = evaluation_samples(val_set, config).indices
    assert chosen == evaluation_samples(val_set, config).indices  # the same samples each time
    assert len(chosen) == 2 * config.val_batch_size == len(set(chosen)) and chosen == sorted(chosen)
    assert evaluation_samples(val_set, Config(**{**config.to_dict(), "seed": config.seed + 1})).indices == chosen
    assert evaluation_samples(val_set, Config(**{**config.to_dict(), "data_seed": config.data_seed + 1})).indices \
        != chosen  # --data-seed draws them; --seed does not
    assert chosen != list(range(len(chosen)))  # a draw, not the split's first samples
    assert evaluation_samples(val_set, Config()) is val_set  # 0: the whole split


def test_evaluating_in_the_middle_of_epochs_changes_no_weight(step_runs):
    stepwise, plain = step_runs["stepwise"], step_runs["max_steps_only"]
    assert stepwise.weights == plain.weights
    assert rows(stepwise, "train") == rows(plain, "train")


def test_a_run_stopped_where_an_evaluation_is_due_resumes_exactly(step_runs):
    """Stopped at step 6 (evaluated, then checkpointed): the resumed run neither evaluates step 6
    again nor misses it, and ends as the run that never stopped."""
    resumed, whole = step_runs["stepwise_resumed"], step_runs["stepwise"]
    assert resumed.metrics == whole.metrics and resumed.weights == whole.weights


def verified(run_dir, tmp_path) -> tuple[int, str]:
    """`verify RUN_DIR` in a fresh process: (exit status, what it printed)."""
    process = start_module("verify", str(run_dir), log=tmp_path / f"verify-{run_dir.name}.log", env=python_env())
    return process.wait(), process.stdout


def test_verify_reruns_a_run_of_steps_and_evaluations_in_the_middle_of_epochs(step_runs, tmp_path):
    """REPRODUCED; the control: the same run with one mid-epoch evaluation's figure changed by hand
    is caught at that row, so verify compared the evaluations it re-ran."""
    run = step_runs["stepwise"]
    code, out = verified(run.path, tmp_path)
    assert code == 0 and f"REPRODUCED weights_sha256 {run.weights}" in out, out
    copy = tmp_path / "edited"
    shutil.copytree(run.path, copy)
    lines = (copy / "metrics.csv").read_text().splitlines(keepends=True)
    row = next(i for i, line in enumerate(lines) if line.startswith(f"0,{EVERY},val,"))
    fields = lines[row].split(",")
    fields[4] = repr(float(fields[4]) + 1.0)  # the loss, the first figure
    lines[row] = ",".join(fields)
    (copy / "metrics.csv").write_text("".join(lines))
    code, out = verified(copy, tmp_path)
    assert code == 1 and f"DIVERGED at step {EVERY} (val), loss" in out, out


def test_verify_reruns_an_early_stopped_run_to_the_same_stop(step_runs, tmp_path):
    stopped = [name for name in ("early_max", "early_min") if step_runs[name].summary["early_stop_step"]]
    assert stopped, "neither run stopped early: the loss kept beating both its highest and its lowest"
    run = step_runs[stopped[0]]
    code, out = verified(run.path, tmp_path)
    assert code == 0 and f"REPRODUCED weights_sha256 {run.weights}" in out, out


def evaluations_to_stop(run: Run, keep_best: str, patience: int) -> int | None:
    """The step at which --early-stop `patience` ends the run, found here from its val rows alone:
    the first evaluation after which `patience` evaluations in a row have not beaten the best one
    (strictly higher, or lower) of those before them; None if it never comes."""
    losses = [(int(row["step"]), float(row["loss"])) for row in rows(run, "val")]
    best, since = None, 0
    for step, loss in losses:
        if best is None or (loss > best if keep_best == "max:loss" else loss < best):
            best, since = loss, 0
        else:
            since += 1
        if since >= patience:
            return step if step < run.summary["steps"] or step < 2 * P else None  # at the last step: no stop
    return None


@pytest.mark.parametrize("name, keep_best", [("early_max", "max:loss"), ("early_min", "min:loss")])
def test_early_stop_ends_the_run_where_its_evaluations_say(name, keep_best, step_runs):
    run = step_runs[name]
    stop = evaluations_to_stop(run, keep_best, patience=2)
    length = 2 * P  # FAST's two epochs, had it not stopped
    assert run.summary["early_stop_step"] == stop
    assert run.summary["steps"] == (stop or length) == int(rows(run, "train")[-1]["step"])
    best = json.loads((run.path / "best.json").read_text())
    assert run.summary["best"] == best and best["keep_best"] == keep_best


def test_a_run_killed_after_its_stopping_evaluation_resumes_and_stops_at_once(step_runs, tmp_path):
    """Its checkpoint at the stopping step is the newest: resumed, it trains no step and writes the
    same model and summary (its time aside)."""
    stopped = [name for name in ("early_max", "early_min") if step_runs[name].summary["early_stop_step"]]
    assert stopped, "neither run stopped early: the loss kept beating both its highest and its lowest"
    run = step_runs[stopped[0]]
    copy = tmp_path / "run"
    shutil.copytree(run.path, copy)
    (copy / "summary.json").unlink()
    (copy / "model.pt").unlink()
    process = start_module("train", "--out", str(copy), "--resume", log=tmp_path / "resume.log", env=python_env())
    assert process.wait() == 0, process.stderr[-3000:]
    again = read_run(copy)
    assert again.metrics == run.metrics and again.weights == run.weights
    timings = ("train_seconds", "samples_per_second", "seconds_per_step", "tokens_per_second")  # never compared
    assert {k: v for k, v in again.summary.items() if k not in timings} == \
        {k: v for k, v in run.summary.items() if k not in timings}


def test_patience_run_out_at_the_last_evaluation_is_no_early_stop(tmp_path, capsys):
    """Two evaluations, patience 1, watched both ways: whichever way the loss went, one of the two
    runs used up its patience at the second, the run's last: it ran its whole length, so neither
    records an early stop nor says it stopped early."""
    from {{ cookiecutter.project_slug }} import train

    for way in ("max", "min"):
        assert train.main(["--out", str(tmp_path / way), *FAST, "--early-stop", "1", "--keep-best", f"{way}:loss"]) == 0
        summary = read_run(tmp_path / way).summary
        assert summary["early_stop_step"] is None and summary["steps"] == 2 * P
    assert "stopped early" not in capsys.readouterr().out


def test_a_failure_inside_an_evaluation_leaves_no_checkpoint_of_its_step(tmp_path, monkeypatch):
    """The second mid-epoch evaluation (step 6) fails: the run ends with the checkpoint of step 3,
    not one of step 6, whose resumed run would never evaluate step 6. Resumed, it equals the run
    that never failed (both made in this process)."""
    from {{ cookiecutter.project_slug }} import train

    args = [*FAST, "--eval-every-steps", str(EVERY), "--checkpoint-every", str(EVERY)]
    assert train.main(["--out", str(tmp_path / "whole"), *args]) == 0
    real, calls = train.evaluate, []

    def fails_the_second_time(*call_args, **call_kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a metric failed")
        return real(*call_args, **call_kwargs)

    monkeypatch.setattr(train, "evaluate", fails_the_second_time)
    assert train.main(["--out", str(tmp_path / "failed"), *args]) == 1
    assert sorted(path.name for path in (tmp_path / "failed" / "checkpoints").glob("step-*.pt")) == \
        [f"step-{EVERY:08d}.pt"]
    monkeypatch.setattr(train, "evaluate", real)
    assert train.main(["--out", str(tmp_path / "failed"), "--resume"]) == 0
    whole, resumed = read_run(tmp_path / "whole"), read_run(tmp_path / "failed")
    assert resumed.metrics == whole.metrics and resumed.weights == whole.weights


@pytest.mark.parametrize("args, says", [
    (("--early-stop", "2"), "--early-stop needs the figure it watches: add --keep-best"),
    (("--max-steps", "-1"), "argument --max-steps: -1 is not at least 0"),
    (("--eval-batches", "x"), "argument --eval-batches: 'x' is not an integer"),
    (("--max-steps", "7", "--epochs", "3"), "--max-steps 7 and --epochs 3 both set the run's length"),
], ids=["early stop without keep-best", "negative max-steps", "eval-batches not a number", "two lengths"])
def test_what_cannot_run_is_refused_in_one_line_before_any_file(args, says, tmp_path, capsys):
    from {{ cookiecutter.project_slug }} import train

    with pytest.raises(SystemExit) as ended:
        train.main(["--out", str(tmp_path / "run"), *FAST, *args])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.startswith(f"{prog('train')}: error: ") and says in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_resuming_an_early_stopping_run_with_another_figure_watched_is_refused(step_runs, tmp_path, capsys):
    """With --early-stop, --keep-best decides where the run ends: --resume may not change it."""
    from {{ cookiecutter.project_slug }} import train

    copy = tmp_path / "run"
    shutil.copytree(step_runs["early_max"].path, copy)
    (copy / "summary.json").unlink()
    with pytest.raises(SystemExit) as ended:
        train.main(["--out", str(copy), "--resume", "--keep-best", "min:loss"])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "keep_best (recorded 'max:loss', given 'min:loss')" in err, err


@pytest.mark.parametrize("name", ["max_steps_only", "max_steps_resumed"])
def test_the_summary_records_the_runs_speed_over_the_samples_it_trained_on(name, step_runs):
    """samples_per_second x train_seconds: the samples the test counts (one whole epoch, then
    LENGTH - P batches of the second), a resumed run's too; seconds_per_step x steps: train_seconds."""
    run = step_runs[name]
    train_samples = min(len(task.make_datasets(Config())[0]), SAMPLES)
    seconds = run.summary["train_seconds"]
    assert run.summary["samples_per_second"] * seconds == pytest.approx(train_samples + (LENGTH - P) * BATCH)
    assert run.summary["seconds_per_step"] * LENGTH == pytest.approx(seconds)
    assert ("tokens_per_second" in run.summary) == hasattr(task, "tokens_per_sample")  # a task's count, or none


def test_the_summary_counts_an_epochs_short_last_batch_as_the_samples_it_holds(tmp_path):
    """An epoch whose samples are no multiple of --batch-size ends in a short batch: the speed that
    summary.json records is over the samples trained on, counted here from the dataset (two epochs
    of two batches, the second short), not over steps x --batch-size."""
    from {{ cookiecutter.project_slug }} import train

    samples = min(len(task.make_datasets(Config())[0]), 64)
    batch = samples // 2 + 1  # two batches an epoch: `batch` samples, then the `samples - batch` left
    assert 0 < samples - batch < batch
    assert train.main(["--out", str(tmp_path / "run"), "--epochs", "2", "--device", "cpu", "--checkpoint-every", "0",
                       "--max-samples", str(samples), "--batch-size", str(batch)]) == 0
    summary = read_run(tmp_path / "run").summary
    assert summary["samples_per_second"] * summary["train_seconds"] == pytest.approx(2 * samples)
    assert summary["seconds_per_step"] * 4 == pytest.approx(summary["train_seconds"])


def test_a_task_that_counts_tokens_gets_tokens_a_second(tmp_path, monkeypatch, capsys):
    """task.py's optional tokens_per_sample(config): the epoch lines and summary.json say tokens a
    second too, that many times the samples a second."""
    from {{ cookiecutter.project_slug }} import train

    monkeypatch.setattr(task, "tokens_per_sample", lambda config: 7, raising=False)
    assert train.main(["--out", str(tmp_path / "run"), *FAST]) == 0
    summary = read_run(tmp_path / "run").summary
    assert summary["tokens_per_second"] == pytest.approx(7 * summary["samples_per_second"])
    epoch_lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert len(epoch_lines) == 2 and all(" tokens/s " in line for line in epoch_lines)
