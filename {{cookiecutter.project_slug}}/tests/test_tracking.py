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
