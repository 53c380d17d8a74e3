"""Specifications of offline tracking: TensorBoard sees the metrics, and the weights do not change."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from conftest import FAST, TENSORBOARD

needs_tensorboard = pytest.mark.skipif(not TENSORBOARD, reason="tensorboard is not installed: it is an optional "
                                       "extra (pip install -e '.[tensorboard]'), which the CI workflow installs")


@needs_tensorboard
def test_tensorboard_on_and_off_give_the_same_weights(runs):
    tracked = runs["seed7_workers3_eval_never"]
    assert tracked.config["tensorboard"] and not runs["seed7"].config["tensorboard"]
    assert tracked.weights == runs["seed7"].weights
    assert tracked.train_losses == runs["seed7"].train_losses


@needs_tensorboard
def test_tensorboard_event_files_hold_the_metrics_of_metrics_csv(runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = runs["seed7_workers3_eval_never"]
    events = EventAccumulator(str(run.path / "tensorboard"))
    events.Reload()
    losses = [(event.step, event.value) for event in events.Scalars("train/loss")]
    train = [row for row in run.metrics if row["split"] == "train"]
    assert [step for step, _ in losses] == [int(row["step"]) for row in train]
    # TensorBoard stores float32: equal to the float32 of each exact value in metrics.csv.
    import numpy as np

    assert [value for _, value in losses] == [float(np.float32(float(row["loss"]))) for row in train]


def test_tensorboard_without_the_package_gets_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    import importlib.util

    from {{ cookiecutter.project_slug }}.train import main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else real_find_spec(name, *a))
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "run"), "--tensorboard"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tensorboard needs the tensorboard package" in err[0]


def test_the_tasks_own_trackers_get_every_row_of_metrics_csv_and_change_no_weight(tmp_path, monkeypatch):
    """task.py's optional trackers(config, out) returns functions that take each metrics row, on
    rank 0, as W&B's or MLflow's log would (docs/studies.md): they get every row, train and val,
    with the exact figures of metrics.csv, and the run's weights are those of one without them."""
    from {{ cookiecutter.project_slug }} import task
    from {{ cookiecutter.project_slug }}.engine.runs import read_run
    from {{ cookiecutter.project_slug }}.train import main

    from conftest import FAST

    seen, opened = [], []
    monkeypatch.setattr(task, "trackers", lambda config, out: opened.append((config.seed, out)) or [seen.append],
                        raising=False)
    assert main(["--out", str(tmp_path / "tracked"), *FAST, "--seed", "7"]) == 0
    run = read_run(tmp_path / "tracked")
    assert opened == [(7, tmp_path / "tracked")]
    assert [(row["step"], row["split"]) for row in seen] == [(int(row["step"]), row["split"]) for row in run.metrics]
    assert all(repr(float(row[name])) == recorded[name] for row, recorded in zip(seen, run.metrics, strict=True)
               for name in run.metric_names)
    monkeypatch.delattr(task, "trackers")
    assert main(["--out", str(tmp_path / "untracked"), *FAST, "--seed", "7"]) == 0  # in this process: its hash seed
    assert run.weights == read_run(tmp_path / "untracked").weights  # the control: tracked or not, one result


@needs_tensorboard
def test_the_tasks_own_trackers_and_tensorboard_each_get_every_row(tmp_path, monkeypatch):
    """One tracker does not take another's place: with trackers in task.py and --tensorboard, the
    task's get every row of metrics.csv and TensorBoard every training loss."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from {{ cookiecutter.project_slug }} import task
    from {{ cookiecutter.project_slug }}.engine.runs import read_run
    from {{ cookiecutter.project_slug }}.train import main

    seen = []
    monkeypatch.setattr(task, "trackers", lambda config, out: [seen.append], raising=False)
    assert main(["--out", str(tmp_path / "both"), *FAST, "--tensorboard"]) == 0
    run = read_run(tmp_path / "both")
    events = EventAccumulator(str(run.path / "tensorboard"))
    events.Reload()
    assert [(row["step"], row["split"]) for row in seen] == [(int(row["step"]), row["split"]) for row in run.metrics]
    assert [event.step for event in events.Scalars("train/loss")] == [
        int(row["step"]) for row in run.metrics if row["split"] == "train"]


def trackers_of_the_docs(package: str):
    """The trackers(config, out) that docs/studies.md gives for `package` (wandb or mlflow), run
    from the docs' own text: the example a user copies is the one tested."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "studies.md").read_text(encoding="utf-8")
    code = next(block for block in re.findall(r"```python\n(.*?)```", text, re.S)
                if block.startswith("def trackers(") and f"    import {package}\n" in block)
    namespace: dict = {}
    exec(code, namespace)
    return namespace["trackers"]


@pytest.mark.parametrize("package", ["wandb", "mlflow"])
def test_each_trackers_example_logs_the_rows_of_metrics_csv_and_changes_no_weight(package, tmp_path, monkeypatch):
    """W&B offline and MLflow with a sqlite store, as docs/studies.md sets them up in task.py: the
    run's weights and metrics.csv are those of a run without them; MLflow, read back, holds each
    training loss of metrics.csv at its step (W&B's offline files are its own format: its run
    folder is there)."""
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed: an optional extra (pip install -e '.[{package}]')")
    from {{ cookiecutter.project_slug }} import task
    from {{ cookiecutter.project_slug }}.engine.runs import read_run
    from {{ cookiecutter.project_slug }}.train import main

    monkeypatch.chdir(tmp_path)  # a tracker that wrote into the working folder would show below
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setattr(task, "trackers", trackers_of_the_docs(package), raising=False)
    try:
        assert main(["--out", str(tmp_path / "tracked"), *FAST]) == 0
    finally:  # what the process would do as it exits: the tracker's run ends
        tracker = importlib.import_module(package)
        if package == "wandb":
            tracker.finish()
        else:
            tracker.end_run()
    monkeypatch.delattr(task, "trackers")
    assert main(["--out", str(tmp_path / "plain"), *FAST]) == 0
    tracked, plain = read_run(tmp_path / "tracked"), read_run(tmp_path / "plain")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["plain", "tracked"]
    assert tracked.weights == plain.weights and tracked.metrics == plain.metrics
    if package == "wandb":
        assert list((tmp_path / "tracked" / "wandb").glob("offline-run-*"))
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'tracked' / 'mlflow.db').absolute()}")
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    (run,) = client.search_runs(experiments)
    logged = [(metric.step, metric.value) for metric in client.get_metric_history(run.info.run_id, "train/loss")]
    train = [row for row in tracked.metrics if row["split"] == "train"]
    assert sorted(logged) == [(int(row["step"]), float(row["loss"])) for row in train]
