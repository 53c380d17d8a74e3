"""Specifications of evaluation beyond tests/test_eval_mode.py (eval mode, nothing changed, the same figures
twice, the mode restored): every figure a float, the whole split's mean, dropout off; and training
in train mode whatever mode the model was in. Then the evaluate command: a run's saved weights on a
split, without training, giving exactly the figures the run recorded; and --keep-best, whose best.pt
it scores again."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import torch

from {{ cookiecutter.project_slug }} import evaluate as evaluate_command
from {{ cookiecutter.project_slug }} import task
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine.checkpoint import TrainingState
from {{ cookiecutter.project_slug }}.engine.cli import prog
from {{ cookiecutter.project_slug }}.engine.optim import make_optimizer
from {{ cookiecutter.project_slug }}.engine.runs import Run, read_run
from {{ cookiecutter.project_slug }}.train import evaluate, first, keep_if_best, make_loaders

from conftest import (
    BATCH,
    FAST,
    SAMPLES,
    precision_problem,
    python_env,
    start_module,
    steps_per_epoch,
    train_many,
    training_steps,
)

CPU = torch.device("cpu")
CONFIG = Config(seed=5, device="cpu", batch_size=BATCH, max_samples=SAMPLES)


def autocast_in_effect() -> torch.dtype | None:
    """The dtype CPU autocast computes in here, or None when it is off."""
    try:
        return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
    except (AttributeError, TypeError):  # torch before 2.4
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None


def state_for(model: torch.nn.Module, lr: float = 0.05) -> TrainingState:
    optimizer, scheduler = make_optimizer(model, Config(lr=lr, schedule="constant"), steps=1000)
    return TrainingState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))


@pytest.fixture(scope="module")
def trained():
    """A model trained a few steps with the real loop (shared: evaluate must leave it unchanged,
    which the tests check). Training moves BatchNorm's running statistics, if the model has any,
    away from their defaults, so an evaluation that updated them would be caught."""
    torch.manual_seed(CONFIG.seed)
    train_set, val_set = task.make_datasets(CONFIG)
    model = task.make_model(CONFIG, train_set)
    train_loader, val_loader = make_loaders(first(train_set, SAMPLES), first(val_set, SAMPLES), CONFIG)
    for _ in zip(range(4), training_steps(model, train_loader, state_for(model), CONFIG), strict=False):
        pass
    return model, val_loader, train_loader


@pytest.fixture
def trained_model_and_loader(trained):
    model, loader, _ = trained
    model.train()
    return model, loader


def test_evaluation_returns_every_figure_of_the_task_as_a_float(trained_model_and_loader):
    model, loader = trained_model_and_loader
    figures = evaluate(model, loader, CPU)
    assert "loss" in figures and task.HEADLINE_METRIC in figures
    assert all(type(value) is float for value in figures.values())


def test_evaluation_averages_over_the_whole_split_not_over_batches(trained_model_and_loader):
    """The sums are added up before the task divides: the figures do not depend on how the split
    is cut into batches (to rounding: float sums in another order)."""
    model, loader = trained_model_and_loader
    _, other_loader = make_loaders(*(first(s, SAMPLES) for s in task.make_datasets(CONFIG)),
                                   Config(**{**CONFIG.to_dict(), "val_batch_size": 7}))
    whole, in_sevens = evaluate(model, loader, CPU), evaluate(model, other_loader, CPU)
    assert whole == pytest.approx(in_sevens, rel=1e-5)


def test_dropout_is_inactive_during_evaluation(trained_model_and_loader):
    model, loader = trained_model_and_loader
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    if not dropouts:
        pytest.skip("this project's model has no dropout")
    seen = []
    hooks = [d.register_forward_hook(lambda module, inputs, output: seen.append(
        (module.training, torch.equal(inputs[0], output)))) for d in dropouts]
    evaluate(model, loader, CPU)
    for hook in hooks:
        hook.remove()
    assert seen and all(not training and unchanged for training, unchanged in seen)


def test_training_runs_in_train_mode_whatever_mode_the_model_was_left_in(tmp_path, monkeypatch):
    """Dropout on and BatchNorm statistics updating at every step, even for a model that make_model
    (or an evaluation that forgot to restore the mode) left in eval mode."""
    from {{ cookiecutter.project_slug }} import train

    make_model, train_step, modes = task.make_model, train.train_step, []
    monkeypatch.setattr(task, "make_model", lambda config, train_set: make_model(config, train_set).eval())

    def noting_the_mode(model, *args):
        modes.append(model.training)
        return train_step(model, *args)

    monkeypatch.setattr(train, "train_step", noting_the_mode)
    assert train.main(["--out", str(tmp_path / "run"), *FAST, "--epochs", "2"]) == 0
    assert modes and all(modes), modes  # the second epoch too, after the first one's evaluation


@pytest.mark.parametrize("precision, dtype", [("fp32", None), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_evaluation_computes_in_the_runs_precision(precision, dtype, trained, monkeypatch):
    """What --precision bf16 or fp16 trains in, it is evaluated in: the task's sums are taken under autocast."""
    problem = precision_problem(precision) if precision != "fp32" else None
    if problem:  # the task's model has no kernel for it on this CPU: conftest's reason, as the precision tests skip
        pytest.skip(problem)
    model, val_loader, _ = trained
    seen, real = [], task.batch_sums
    monkeypatch.setattr(task, "batch_sums", lambda outputs, targets: seen.append(autocast_in_effect()) or
                        real(outputs, targets))
    evaluate(model, val_loader, CPU, precision)
    assert seen and set(seen) == {dtype}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Run:
    """A FAST run with seed 3, trained in a fresh process, whose only checkpoints are its two
    epochs' ends (--checkpoint-every 0): each holds the model that epoch's validation row scored."""
    root = tmp_path_factory.mktemp("evaluated")
    process = start_module("train", "--out", str(root / "run"), *FAST, "--checkpoint-every", "0", "--seed", "3",
                           log=root / "run.log")
    assert process.wait() == 0, process.stderr[-3000:]
    return read_run(root / "run")


def evaluated(run_dir, *args: str, json_file) -> dict:
    """`evaluate RUN_DIR ARGS --json FILE` in this process (it starts no interpreter of its own
    here), and what it wrote."""
    assert evaluate_command.main([str(run_dir), *args, "--json", str(json_file)]) == 0
    return json.loads(json_file.read_text())


def test_evaluate_gives_exactly_the_runs_last_validation_figures_in_a_fresh_process(finished_run, tmp_path):
    """model.pt on the validation split: summary.json's figures bit for bit (JSON keeps a float's
    repr). The process is started with another hash seed: evaluate must restart with the run's (3)
    before torch loads, as train does, so that a task whose data depends on it builds the same data."""
    process = start_module("evaluate", str(finished_run.path), "--json", str(tmp_path / "figures.json"),
                           log=tmp_path / "evaluate.log", env=python_env(PYTHONHASHSEED="123"))
    assert process.wait() == 0, process.stderr[-3000:]
    result = json.loads((tmp_path / "figures.json").read_text())
    summary = finished_run.summary
    assert result["figures"] == {name: summary[f"val_{name}"] for name in summary["metrics"]}
    assert result["weights_sha256"] == finished_run.weights and result["step"] == summary["steps"]
    assert result["split"] == "val" and result["samples"] == min(len(task.make_datasets(Config())[1]), SAMPLES)
    assert result["python_hash_seed"] == finished_run.environment["python_hash_seed"] == "3"
    headline = task.HEADLINE_METRIC
    assert f"val_{headline} {summary[f'val_{headline}']:.4f}" in process.stdout


def test_each_epochs_last_checkpoint_gives_exactly_that_epochs_validation_row(finished_run, tmp_path):
    rows = [row for row in finished_run.metrics if row["split"] == "val"]
    assert len(rows) == 2
    for row in rows:
        checkpoint = finished_run.path / "checkpoints" / f"step-{int(row['step']):08d}.pt"
        result = evaluated(finished_run.path, "--weights", str(checkpoint), json_file=tmp_path / "figures.json")
        assert {name: repr(value) for name, value in result["figures"].items()} == \
            {name: row[name] for name in finished_run.metric_names}, row["step"]
        assert result["step"] == int(row["step"])
    # The control: the two epochs' figures differ, so each check above read its own checkpoint.
    assert rows[0]["loss"] != rows[1]["loss"]


def test_each_split_is_the_one_asked_for(finished_run, tmp_path, monkeypatch):
    """--split train: the run's training samples (its --max-samples of them), other figures than
    the validation split's; --split test: what task.py's make_test_set returns (here the
    validation set, so the validation figures)."""
    train_set, val_set = task.make_datasets(Config())
    on_train = evaluated(finished_run.path, "--split", "train", json_file=tmp_path / "train.json")
    assert on_train["samples"] == min(len(train_set), SAMPLES) and on_train["split"] == "train"
    assert on_train["figures"]["loss"] != finished_run.summary["val_loss"]
    monkeypatch.setattr(task, "make_test_set", lambda config: task.make_datasets(config)[1], raising=False)
    on_test = evaluated(finished_run.path, "--split", "test", json_file=tmp_path / "test.json")
    assert on_test["figures"] == {name: finished_run.summary[f"val_{name}"] for name in finished_run.summary["metrics"]}


def test_the_figures_go_into_the_run_folder_and_the_runs_record_stays_as_it_was(finished_run, tmp_path):
    """Without --json: RUN_DIR/evaluations/SPLIT-WEIGHTS-HASH.json, one file per split and weights
    (another run's model.pt replaces none), every other file of the run byte for byte as it was; a
    new run over the folder (--overwrite) removes them with the earlier run's files."""
    from {{ cookiecutter.project_slug }} import train

    copy = tmp_path / "run"
    shutil.copytree(finished_run.path, copy)
    before = {path.relative_to(copy): path.read_bytes() for path in copy.rglob("*") if path.is_file()}
    checkpoint = sorted((copy / "checkpoints").glob("step-*.pt"))[0]
    assert evaluate_command.main([str(copy)]) == 0
    assert evaluate_command.main([str(copy), "--split", "train", "--weights", str(checkpoint)]) == 0
    other = tmp_path / "elsewhere" / "model.pt"  # another run's model.pt: the name of the run's own
    other.parent.mkdir()
    torch.save(torch.load(checkpoint, weights_only=True)["model"], other)
    assert evaluate_command.main([str(copy), "--weights", str(other)]) == 0
    after = {path.relative_to(copy): path.read_bytes() for path in copy.rglob("*") if path.is_file()}
    assert {path: after[path] for path in before} == before
    checkpoint_hash = json.loads(next((copy / "evaluations").glob("train-*.json")).read_text())["weights_sha256"]
    assert sorted(map(str, after.keys() - before.keys())) == sorted([
        f"evaluations/train-{checkpoint.stem}-{checkpoint_hash[:12]}.json",
        f"evaluations/val-model-{finished_run.weights[:12]}.json",
        f"evaluations/val-model-{checkpoint_hash[:12]}.json"])
    on_val = json.loads((copy / "evaluations" / f"val-model-{finished_run.weights[:12]}.json").read_text())
    assert on_val["figures"] == {name: finished_run.summary[f"val_{name}"] for name in finished_run.summary["metrics"]}
    assert train.main(["--out", str(copy), "--overwrite", *FAST, "--epochs", "1"]) == 0
    assert not (copy / "evaluations").exists()


def other_epochs_model(run: Run, copy) -> None:
    """`copy`'s model.pt replaced by the model of the run's first epoch's end."""
    checkpoint = torch.load(sorted((run.path / "checkpoints").glob("step-*.pt"))[0], weights_only=True)
    torch.save(checkpoint["model"], copy / "model.pt")


def one_tensor_fewer(run: Run, copy) -> None:
    weights = torch.load(run.path / "model.pt", weights_only=True)
    torch.save(dict(list(weights.items())[1:]), copy / "weights.pt")


@pytest.mark.parametrize("args, change, says", [
    (["{missing}"], None, "does not exist"),
    (["{copy}"], lambda run, copy: [(copy / name).unlink() for name in ("model.pt", "summary.json")],
     "(the run has not finished); pass --weights"),
    (["{copy}"], lambda run, copy: (copy / "model.pt").unlink(), "(the run finished, but the file is gone)"),
    (["{copy}"], other_epochs_model, "is not the model the run saved: its weights_sha256 is"),
    (["{copy}", "--weights", "{copy}/weights.pt"], one_tensor_fewer,
     "does not fit the model task.py makes"),
    (["{copy}", "--weights", "{copy}/config.json"], None, "cannot be loaded: not a checkpoint file"),
    (["{copy}", "--split", "test"], None, "task.py has no make_test_set(config)"),
    (["{copy}", "--device", "cuda:99"], None, "(--device chooses another)"),
], ids=["not a run", "unfinished", "model.pt gone", "model.pt changed", "weights of another model", "not weights",
        "no test split", "no such device"])
def test_what_cannot_be_evaluated_gets_one_line_and_exit_2(args, change, says, finished_run, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(finished_run.path, copy)
    if change is not None:
        change(finished_run, copy)
    args = [arg.format(copy=copy, missing=tmp_path / "missing") for arg in args]
    with pytest.raises(SystemExit) as ended:
        evaluate_command.main([*args, "--json", str(tmp_path / "figures.json")])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.startswith(f"{prog('evaluate')}: error: ") and says in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "figures.json").exists()


@pytest.fixture(scope="module")
def best_kept(tmp_path_factory) -> dict[str, Run]:
    """Three epochs, each evaluated, with --keep-best watching the validation loss both ways (so
    that one of the two keeps an evaluation before the last, whichever way the loss goes), and the
    max run again, stopped after its second epoch and resumed."""
    root = tmp_path_factory.mktemp("best")
    watched = ("--epochs", "3", "--checkpoint-every", "0", "--keep-best")
    stop = ("--stop-after-steps", str(2 * steps_per_epoch()))
    runs = train_many(root, {"min": ((*watched, "min:loss"), {}), "max": ((*watched, "max:loss"), {}),
                             "max_resumed": ((*watched, "max:loss", *stop), {})})
    process = start_module("train", "--out", str(root / "max_resumed"), "--resume", log=root / "resume.log")
    assert process.wait() == 0, process.stderr[-3000:]
    runs["max_resumed"] = read_run(root / "max_resumed")
    return runs


def best_row(run: Run, lowest: bool) -> dict:
    """The validation row that --keep-best keeps, found here from metrics.csv alone: the first row
    whose loss is the lowest (or highest) of all."""
    rows = [row for row in run.metrics if row["split"] == "val"]
    target = (min if lowest else max)(float(row["loss"]) for row in rows)
    return next(row for row in rows if float(row["loss"]) == target)


@pytest.mark.parametrize("name, lowest", [("min", True), ("max", False)])
def test_keep_best_keeps_the_evaluation_that_beat_every_earlier_one_and_evaluate_scores_it_again(
        name, lowest, best_kept, tmp_path):
    run = best_kept[name]
    row, record = best_row(run, lowest), json.loads((run.path / "best.json").read_text())
    assert record["step"] == int(row["step"]) and record["keep_best"] == f"{name}:loss"
    assert {figure: repr(record[f"val_{figure}"]) for figure in run.metric_names} == \
        {figure: row[figure] for figure in run.metric_names}
    again = evaluated(run.path, "--weights", str(run.path / "best.pt"), json_file=tmp_path / "best.json")
    assert again["weights_sha256"] == record["weights_sha256"]
    assert {figure: repr(value) for figure, value in again["figures"].items()} == \
        {figure: row[figure] for figure in run.metric_names}


def test_the_summary_of_a_run_that_kept_its_best_records_best_json_without_early_stop_too(best_kept):
    """summary.json's "best" is best.json's evaluation for every run with --keep-best (these runs
    stop on nothing); "early_stop_step" is there only for a run with --early-stop."""
    for name, run in best_kept.items():
        assert run.summary["best"] == json.loads((run.path / "best.json").read_text()), name
        assert "early_stop_step" not in run.summary, name


def test_keep_best_changes_nothing_a_run_computes_and_each_way_keeps_its_own(best_kept):
    low, high = best_kept["min"], best_kept["max"]
    assert low.metrics == high.metrics and low.weights == high.weights
    # The control: the two ways keep two evaluations (the losses of three epochs are not all equal).
    assert json.loads((low.path / "best.json").read_text())["step"] != \
        json.loads((high.path / "best.json").read_text())["step"]
    # The epoch line says when best.pt was written: at each new highest loss.
    losses = [float(row["loss"]) for row in high.metrics if row["split"] == "val"]
    records = sum(1 for i, loss in enumerate(losses) if all(loss > earlier for earlier in losses[:i]))
    assert (high.path.parent / "max.out").read_text().count("-> best.pt") == records  # train_many's log


def test_a_resumed_run_keeps_the_same_best_as_one_never_stopped(best_kept):
    """The earlier evaluations come from metrics.csv, so a run resumed after its second epoch still
    weighs the third against the first two."""
    resumed, whole = best_kept["max_resumed"], best_kept["max"]
    assert resumed.metrics == whole.metrics and resumed.weights == whole.weights
    assert json.loads((resumed.path / "best.json").read_text()) == json.loads((whole.path / "best.json").read_text())
    assert (resumed.path / "best.pt").read_bytes() == (whole.path / "best.pt").read_bytes()


@pytest.mark.parametrize("figures, kept", [({"loss": 0.125, "accuracy": 0.75}, True),
                                           ({"loss": 9.0, "accuracy": 0.375}, False)],
                         ids=["its accuracy the highest yet", "its accuracy lower, its loss a larger number"])
def test_keep_best_weighs_the_figure_it_watches_against_that_figures_earlier_values(figures, kept, tmp_path):
    """--keep-best max:accuracy: this evaluation's accuracy against the earlier accuracies, whatever
    its loss. The runs above watch the loss, where a mix-up of the two figures cannot show."""
    earlier = {"loss": [2.0, 1.5], "accuracy": [0.5, 0.25]}
    plan = SimpleNamespace(config=SimpleNamespace(keep_best="max:accuracy"), out=tmp_path)
    state = SimpleNamespace(step=3, epoch=2, model=torch.nn.Linear(2, 1))
    log = SimpleNamespace(column=lambda split, name, before_step: earlier[name])
    assert keep_if_best(plan, state, log, figures) is kept
    assert (tmp_path / "best.json").exists() is kept and (tmp_path / "best.pt").exists() is kept


@pytest.mark.parametrize("value, says", [
    ("max:nope", "--keep-best max:nope: the task has no figure 'nope'; its figures are loss"),
    ("best", "argument --keep-best: 'best' is not off, min:NAME or max:NAME"),
    ("low:loss", "argument --keep-best: 'low:loss' is not off, min:NAME or max:NAME"),
    ("min:", "argument --keep-best: 'min:' is not off, min:NAME or max:NAME"),
], ids=["a figure the task lacks", "not min or max", "a direction misspelled", "no figure named"])
def test_keep_best_of_what_cannot_be_watched_is_refused_in_one_line_before_any_file(value, says, tmp_path, capsys):
    from {{ cookiecutter.project_slug }} import train

    with pytest.raises(SystemExit) as ended:
        train.main(["--out", str(tmp_path / "run"), *FAST, "--keep-best", value])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()  # not even the folder: a refusal leaves the disk as it found it
