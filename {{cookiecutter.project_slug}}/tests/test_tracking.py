"""Specifications of offline tracking: TensorBoard sees the metrics, and the weights do not change."""

from __future__ import annotations

import pytest

from conftest import TENSORBOARD

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
