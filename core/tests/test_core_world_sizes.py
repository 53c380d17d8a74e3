"""engine/world_sizes.py: where a run that went on with another number of processes changed, kept
in the order of its checkpoints, the two of one step (before and after the epoch's evaluation) included."""

from __future__ import annotations

from pathlib import Path

from repro_core.engine.world_sizes import FILE, describe, history_on_resume, position, write_world_sizes

BEFORE = {"step": 8, "epoch": 0, "epoch_step": 8}  # an epoch's last step, checkpointed before its evaluation
AFTER = {"step": 8, "epoch": 1, "epoch_step": 0}  # the same step after it: the next epoch's start


def test_at_one_step_the_checkpoint_after_the_epochs_evaluation_comes_after_the_one_before_it() -> None:
    assert position(BEFORE) < position(AFTER) < position({"step": 9, "epoch": 1, "epoch_step": 1})


def test_a_resume_keeps_the_changes_made_before_its_checkpoint_and_drops_those_after() -> None:
    changed_before = [{"step": 0, "world_size": 2}, {**BEFORE, "world_size": 3}]
    # Resumed after the evaluation, with 3: the change at the checkpoint before it stays as it was.
    assert history_on_resume(changed_before, 2, AFTER, 3) == changed_before
    changed_after = [{"step": 0, "world_size": 2}, {**AFTER, "world_size": 3}]
    # Resumed before the evaluation, with 3: the later change is done again, here.
    assert history_on_resume(changed_after, 2, BEFORE, 3) == changed_before
    # The negative control: back at the world size the run started with, from before any change.
    assert history_on_resume(changed_after, 2, BEFORE, 2) == []


def test_a_second_resume_from_the_checkpoint_of_a_change_makes_that_change_again() -> None:
    """Resumed from BEFORE with 3, stopped, and resumed from BEFORE again: the change made there is
    done again, so the record holds this resume's world size there, once, or none if it is the first's."""
    changed_there = [{"step": 0, "world_size": 2}, {**BEFORE, "world_size": 3}]
    assert history_on_resume(changed_there, 2, BEFORE, 4) == [{"step": 0, "world_size": 2}, {**BEFORE, "world_size": 4}]
    assert history_on_resume(changed_there, 2, BEFORE, 2) == []


def test_the_first_change_of_a_run_that_never_changed_is_recorded_from_the_world_size_it_started_with() -> None:
    assert history_on_resume([], 2, AFTER, 3) == [{"step": 0, "world_size": 2}, {**AFTER, "world_size": 3}]
    assert history_on_resume([], 2, AFTER, 2) == []  # the control: no change, no record


def test_the_history_is_told_in_words_with_the_evaluation_named() -> None:
    assert describe([], 1) == "1 process"
    assert describe([{"step": 0, "world_size": 2}, {**AFTER, "world_size": 3}], 3) == \
        "2 processes, then 3 from step 8 (after its epoch's evaluation)"


def test_the_record_is_written_while_there_is_a_change_and_removed_once_the_run_is_back_to_one(tmp_path: Path) -> None:
    """A run resumed, from before its change, at the world size it started with has one world size
    again: a record kept from before would report a change the run no longer has."""
    changed = [{"step": 0, "world_size": 2}, {**AFTER, "world_size": 3}]
    write_world_sizes(tmp_path, changed)
    assert (tmp_path / FILE).is_file()
    write_world_sizes(tmp_path, [])
    assert not (tmp_path / FILE).exists()
    write_world_sizes(tmp_path, [])  # none to remove: no error
