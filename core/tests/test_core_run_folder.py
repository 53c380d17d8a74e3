"""engine/run_folder.py in this process, file by file: which folder a new run may take and why not,
what clearing an earlier run removes (and leaves), the one writer's lock and who holds it,
metrics.csv row by row and cut back to its checkpoint on a resume, the best model, the leftovers
of interrupted writes, and the error log. test_core_files.py holds the kill and two-process
tests; these are the checks a mutation of one line must fail.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from repro_core.engine.files import write_problem
from repro_core.engine.run_folder import (
    BEST_MODEL,
    BEST_RECORD,
    ERROR_LOG,
    RUN_FILES,
    MetricsLog,
    beats,
    clear_leftovers,
    clear_run_files,
    lock_folder,
    lock_holder,
    make_out_dir,
    name_problem,
    out_dir_refusal,
    unlock_folder,
    write_best,
    write_error_log,
    write_result,
)
from repro_core.engine.tracking import make_trackers, tracking_problem
from repro_core.utils.repro import state_dict_sha256


@pytest.fixture(autouse=True)
def release_this_process_locks() -> Iterator[None]:
    yield
    unlock_folder()


# --- which folder a new run may take ----------------------------------------------------------------------


def test_a_new_run_may_take_a_missing_an_empty_or_a_failed_runs_folder(tmp_path: Path) -> None:
    assert out_dir_refusal(tmp_path / "new" / "run", overwrite=False) is None  # made on the way
    assert out_dir_refusal(tmp_path, overwrite=False) is None  # empty
    (tmp_path / ERROR_LOG).write_text("a failure's traceback\n")
    (tmp_path / "notes.txt").write_text("the user's own\n")
    assert out_dir_refusal(tmp_path, overwrite=False) is None  # an error log alone is no run


@pytest.mark.parametrize("present", [["config.json"], ["metrics.csv", "checkpoints"], list(RUN_FILES)])
def test_a_folder_that_holds_a_run_is_refused_naming_its_files_unless_overwrite(tmp_path: Path,
                                                                               present: list[str]) -> None:
    for name in present:
        if name in ("checkpoints", "tensorboard", "evaluations"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text("x")
    refusal = out_dir_refusal(tmp_path, overwrite=False)
    named = ", ".join(name for name in RUN_FILES if name in present)  # in RUN_FILES' order
    assert refusal == (f"--out {tmp_path} already holds a run ({named}); pass --resume to continue it, "
                       "--overwrite to replace it, or choose another --out")
    assert out_dir_refusal(tmp_path, overwrite=True) is None


def test_an_out_under_a_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file\n")
    out = tmp_path / "notes.txt" / "run"
    assert out_dir_refusal(out, overwrite=False) == f"--out {out}: {tmp_path / 'notes.txt'} exists and is not a folder"
    assert out_dir_refusal(tmp_path / "notes.txt", overwrite=True) == \
        f"--out {tmp_path / 'notes.txt'}: {tmp_path / 'notes.txt'} exists and is not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder: os.access says so")
def test_an_out_in_a_folder_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert out_dir_refusal(locked / "run", overwrite=False) == f"--out {locked / 'run'}: cannot write in {locked}"
    finally:
        locked.chmod(0o700)


def test_an_out_in_a_folder_this_user_may_not_write_in_is_refused(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user who is not root sees a folder of someone else's (root may write anywhere, so the
    answer of os.access is simulated: writing refused, everything else allowed)."""
    monkeypatch.setattr(os, "access", lambda path, mode: not mode & os.W_OK)
    assert out_dir_refusal(tmp_path / "run", overwrite=False) == f"--out {tmp_path / 'run'}: cannot write in {tmp_path}"


def test_the_name_limit_is_the_file_systems_own_or_255_where_it_does_not_say(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def pathconf(path: str, name: str) -> int:  # a file system of 143-byte names (eCryptfs)
        if name != "PC_NAME_MAX":
            raise ValueError(f"unrecognized configuration name {name!r}")
        return 143

    monkeypatch.setattr(os, "pathconf", pathconf)
    assert name_problem(Path("a" * 143)) is None
    assert name_problem(Path("a" * 144)) == (f"--out {'a' * 40}...: the name {'a' * 16}... is 144 bytes long, over "
                                             "this file system's limit of 143")

    def unknown(path: str, name: str) -> int:
        raise OSError("this file system does not say")

    monkeypatch.setattr(os, "pathconf", unknown)
    assert name_problem(Path("a" * 255)) is None
    assert name_problem(Path("a" * 256)).endswith("is 256 bytes long, over this file system's limit of 255")


def test_a_name_longer_than_the_file_system_allows_is_named_in_bytes(tmp_path: Path) -> None:
    limit = os.pathconf(Path.cwd().anchor, "PC_NAME_MAX")
    assert name_problem(tmp_path / ("a" * limit)) is None  # at the limit: allowed
    long = "a" * (limit + 1)
    assert name_problem(tmp_path / long / "run") == (
        f"--out {str(tmp_path / long / 'run')[:40]}...: the name {long[:16]}... is {limit + 1} bytes long, over "
        f"this file system's limit of {limit}")
    wide = "é" * (limit // 2 + 1)  # fewer characters than the limit, more bytes (two each in UTF-8)
    assert len(wide) <= limit and f"is {2 * len(wide)} bytes long" in name_problem(Path(wide))


def test_make_out_dir_makes_every_level_and_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "run"
    assert make_out_dir(out) is None and out.is_dir()
    assert make_out_dir(out) is None  # there already
    (tmp_path / "file").write_text("x")
    file = tmp_path / "file"
    assert make_out_dir(file) == f"--out {file}: {file} exists and is not a folder"
    refusal = make_out_dir(tmp_path / "file" / "run")
    assert refusal is not None and refusal.startswith(f"--out {tmp_path / 'file' / 'run'}: cannot write there (")
    proc = Path("/proc")
    if (proc / "self").is_dir():  # Linux: a folder that is there, and where even root can write no file
        assert write_problem(proc) is not None
        assert make_out_dir(proc) == f"--out {proc}: cannot write there ({write_problem(proc)})"


def test_clearing_an_earlier_run_removes_its_files_and_folders_and_only_those(tmp_path: Path) -> None:
    for name in (*RUN_FILES, ERROR_LOG):
        if name in ("checkpoints", "tensorboard", "evaluations"):
            (tmp_path / name / "inner").mkdir(parents=True)
            (tmp_path / name / "inner" / "file").write_text("x")
        else:
            (tmp_path / name).write_text("x")
    (tmp_path / "notes.txt").write_text("the user's own\n")
    (tmp_path / "data").mkdir()
    clear_run_files(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "notes.txt"]
    clear_run_files(tmp_path)  # nothing left to clear: no error


# --- the one writer's lock --------------------------------------------------------------------------------


def test_the_lock_holder_is_named_by_its_process_id_and_command(tmp_path: Path) -> None:
    assert lock_folder(tmp_path) is None
    held = lock_holder(tmp_path)
    if not Path("/proc/locks").exists():
        assert held == "another process"
        return
    command = " ".join(" ".join(Path("/proc/self/cmdline").read_bytes().decode(errors="replace").split("\0")).split())
    assert held == f"process {os.getpid()} ({command[:120]})"
    other = tmp_path / "unlocked"
    other.mkdir()
    assert lock_holder(other) == "another process"  # no lock on it: nothing to name


def held_elsewhere(folder: Path) -> int:
    """A second open description of `folder`, locked: to flock, as another process's lock is (a
    lock belongs to an open description, not to a process). Close it to release."""
    import fcntl

    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise
    return descriptor


def test_a_folder_held_elsewhere_is_refused_in_one_line_naming_the_holder(tmp_path: Path) -> None:
    other = held_elsewhere(tmp_path)
    try:
        holder = lock_holder(tmp_path)
        assert lock_folder(tmp_path) == (f"--out {tmp_path.resolve()} is in use: {holder} is writing to it; wait for "
                                         "it to end, or stop it, or choose another folder")
        assert lock_folder(tmp_path, "--study").startswith(f"--study {tmp_path.resolve()} is in use: {holder} ")
    finally:
        os.close(other)
    assert lock_folder(tmp_path) is None  # released: this process takes it


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="names the holder from Linux's /proc/locks")
def test_a_holders_command_that_is_long_or_not_utf8_is_named_cut_short_never_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/PID/cmdline holds the arguments as the holder's caller gave them, each ended by a NUL:
    bytes that need not be UTF-8 (simulated here for this process, which holds the lock)."""
    odd = [b"python", b"-c", b"train()", b"--out=\xffrun", b"a" * 150]
    read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda path: b"\0".join(odd) + b"\0"
                        if path == Path(f"/proc/{os.getpid()}/cmdline") else read_bytes(path))
    assert lock_folder(tmp_path) is None
    command = "python -c train() --out=\ufffdrun " + "a" * 150
    assert lock_holder(tmp_path) == f"process {os.getpid()} ({command[:120]})"


def test_releasing_one_folder_keeps_the_others_locked(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    assert lock_folder(first) is None and lock_folder(second) is None
    unlock_folder(first)
    os.close(held_elsewhere(first))  # the first is free again
    with pytest.raises(BlockingIOError):
        held_elsewhere(second)  # the second is still this process's


def test_a_lock_taken_again_by_its_holder_or_released_twice_is_no_error(tmp_path: Path) -> None:
    assert lock_folder(tmp_path, "--study") is None
    assert lock_folder(tmp_path / ".", "--study") is None  # the same folder by another spelling
    unlock_folder(tmp_path)
    unlock_folder(tmp_path)
    unlock_folder()


# --- metrics.csv ----------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


def test_metrics_csv_holds_a_header_then_one_exact_row_per_write_and_hands_each_to_the_trackers(
        tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    log = MetricsLog(path, ("loss", "accuracy"), rows=0, writes=True)
    log.create()
    assert path.read_text() == "epoch,step,split,lr,loss,accuracy\n"
    handed = []
    log.trackers.append(handed.append)
    with log:
        log.write(0, 1, "train", {"loss": 0.1 + 0.2, "accuracy": torch.tensor(0.25)}, lr=1 / 3)
        log.write(0, 1, "val", {"loss": 2.5, "accuracy": 0.5})
        log.sync()
        assert path.read_bytes().decode() == ("epoch,step,split,lr,loss,accuracy\n"  # "\n" alone ends a row
                                              f"0,1,train,{1 / 3!r},{0.1 + 0.2!r},0.25\n0,1,val,,2.5,0.5\n")
        assert read_rows(path)[1:] == [["0", "1", "train", repr(1 / 3), repr(0.1 + 0.2), "0.25"],
                                       ["0", "1", "val", "", "2.5", "0.5"]]
    assert log.rows == 2
    assert handed == [{"epoch": 0, "step": 1, "split": "train", "loss": 0.1 + 0.2, "accuracy": torch.tensor(0.25),
                       "learning_rate": 1 / 3},
                      {"epoch": 0, "step": 1, "split": "val", "loss": 2.5, "accuracy": 0.5}]
    assert log.file.closed


def test_a_rank_that_does_not_write_counts_the_rows_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    log = MetricsLog(path, ("loss",), rows=5, writes=False)
    handed = []
    log.trackers.append(handed.append)
    with log:
        log.write(1, 6, "train", {"loss": 1.0}, lr=0.1)
        log.sync()
    assert log.rows == 6 and not path.exists() and handed == [] and log.file is None
    assert log.train_losses_of(1) == []


def test_the_training_losses_of_an_epoch_are_its_train_rows_only(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.csv", ("loss",), rows=0, writes=True)
    assert log.train_losses_of(0) == []  # no file yet
    log.create()
    with log:
        for epoch, step, split, loss in ((0, 1, "train", 3.0), (0, 2, "train", 2.0), (0, 2, "val", 9.0),
                                         (1, 3, "train", 1.0), (1, 4, "train", 0.5)):
            log.write(epoch, step, split, {"loss": loss}, lr=None if split == "val" else 0.1)
    assert log.train_losses_of(0) == [3.0, 2.0]
    assert log.train_losses_of(1) == [1.0, 0.5]
    assert log.train_losses_of(2) == []


def written(path: Path, rows: int) -> MetricsLog:
    """metrics.csv with `rows` whole rows (loss and accuracy), as a run writes it."""
    log = MetricsLog(path, ("loss", "accuracy"), rows=0, writes=True)
    log.create()
    with log:
        for step in range(1, rows + 1):
            log.write(0, step, "train", {"loss": 1.0 / step, "accuracy": 0.5}, lr=0.1)
    return log


def test_a_resume_cuts_metrics_csv_back_to_the_rows_its_checkpoint_counted(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    written(path, 6)
    whole = path.read_text().splitlines(keepends=True)
    assert MetricsLog(path, ("loss", "accuracy"), rows=4, writes=True).cut_back() is None
    assert path.read_text() == "".join(whole[:5])  # the header and the first four rows, bit for bit
    assert MetricsLog(path, ("loss", "accuracy"), rows=4, writes=True).cut_back() is None  # again: unchanged
    assert path.read_text() == "".join(whole[:5])
    assert MetricsLog(path, ("loss", "accuracy"), rows=0, writes=True).cut_back() is None
    assert path.read_text() == whole[0]


def test_a_torn_last_row_is_cut_off_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    written(path, 3)
    whole = path.read_text()
    path.write_text(whole + "0,4,train,0.1,0.2")  # a kill in the middle of a row
    note = MetricsLog(path, ("loss", "accuracy"), rows=3, writes=True).cut_back()
    assert note == (f"{path} ended in a torn row (written when the run was killed): cut back to the 3 rows its "
                    "checkpoint counts")
    assert path.read_text() == whole


def test_a_torn_first_row_is_cut_off_with_a_note_too(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    written(path, 0)
    header = path.read_text()
    path.write_text(header + "0,1,tr")
    assert "ended in a torn row" in MetricsLog(path, ("loss", "accuracy"), rows=0, writes=True).cut_back()
    assert path.read_text() == header


@pytest.mark.parametrize("tail", ["0,3,train,0.1,0.2\n", "0,3,train,0.1", "", "0,3,train,0.1,0.2,0.5,9\n"],
                         ids=["a row short of a field", "torn", "rows missing", "a field too many"])
def test_fewer_whole_rows_than_the_checkpoint_counts_is_refused_and_the_file_left_alone(tmp_path: Path,
                                                                                      tail: str) -> None:
    path = tmp_path / "metrics.csv"
    written(path, 2)
    text = path.read_text() + tail
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        MetricsLog(path, ("loss", "accuracy"), rows=3, writes=True).cut_back()
    assert str(error.value) == (f"{path} holds 2 whole rows, fewer than the 3 that its checkpoint counts: rows are "
                                "missing, so the resumed run would leave a gap; start it again with --overwrite")
    assert path.read_text() == text


def test_a_deleted_metrics_csv_holds_no_row_and_is_refused_as_one_short_of_rows(tmp_path: Path) -> None:
    """Before, open() raised FileNotFoundError: a failure (exit 1, an error.log), not the refusal."""
    with pytest.raises(ValueError, match="holds 0 whole rows, fewer than the 3 that its checkpoint counts"):
        MetricsLog(tmp_path / "metrics.csv", ("loss", "accuracy"), rows=3, writes=True).cut_back()
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.parametrize("rows", [-1, -7])
def test_a_checkpoint_counting_rows_below_zero_is_refused_and_every_row_kept(tmp_path: Path, rows: int) -> None:
    """A crafted count no run writes: lines[:1 + rows] would keep no header and few rows or none."""
    path = tmp_path / "metrics.csv"
    written(path, 4)
    text = path.read_text()
    with pytest.raises(ValueError, match=f"its checkpoint counts {rows} rows of .*metrics.csv, a number no run writes"):
        MetricsLog(path, ("loss", "accuracy"), rows=rows, writes=True).cut_back()
    assert path.read_text() == text


def test_a_torn_row_before_the_checkpoints_rows_is_no_whole_row(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    written(path, 1)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "0,1,train,0.1\n" + lines[1] * 2)  # row 1 short; rows 2 and 3 whole
    with pytest.raises(ValueError, match="holds 0 whole rows, fewer than the 2"):
        MetricsLog(path, ("loss", "accuracy"), rows=2, writes=True).cut_back()


# --- the best model, the leftovers, the error log ---------------------------------------------------------


def test_a_best_figure_is_compared_by_its_direction_not_its_name() -> None:
    assert beats("max:loss", 2.0, [1.0]) and not beats("max:loss", 0.5, [1.0])
    assert beats("min:accuracy", 0.5, [1.0]) and not beats("min:accuracy", 2.0, [1.0])
    assert not beats("max:accuracy", 1.0, [1.0]) and not beats("min:loss", 1.0, [0.5, 2.0])
    assert beats("min:val:loss", 0.5, [1.0]) and not beats("max:val:loss", 0.5, [1.0])  # a name with a colon


def test_best_pt_holds_the_weights_and_best_json_what_they_scored_and_their_hash(tmp_path: Path) -> None:
    weights = {"w": torch.tensor([1.0, -0.0, 3.5]), "n": torch.tensor(7)}
    write_best(tmp_path, weights, {"epoch": 1, "step": 8, "val_loss": 0.25})
    loaded = torch.load(tmp_path / BEST_MODEL, weights_only=True)
    assert loaded.keys() == weights.keys() and all(torch.equal(loaded[k], weights[k]) for k in weights)
    assert json.loads((tmp_path / BEST_RECORD).read_text()) == {
        "epoch": 1, "step": 8, "val_loss": 0.25, "weights_sha256": state_dict_sha256(weights)}
    assert sorted(path.name for path in tmp_path.iterdir()) == [BEST_RECORD, BEST_MODEL]  # no temporary left


def test_leftovers_of_interrupted_writes_go_and_everything_else_stays(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    gone = [tmp_path / ERROR_LOG, tmp_path / ".model.pt.1234.tmp", checkpoints / ".step_8.pt.99.tmp"]
    gone_folders = [checkpoints / ".step_8.partial", checkpoints / ".step_4.deleting", tmp_path / ".shards.old"]
    kept = [tmp_path / "model.pt", tmp_path / ".hidden", tmp_path / "notes.tmp", checkpoints / "step_4.pt",
            checkpoints / ".keep"]
    kept_folders = [checkpoints / "step_12", tmp_path / ".git", checkpoints / ".cache"]
    for path in (*gone, *kept):
        path.write_text("x")
    for folder in (*gone_folders, *kept_folders):
        folder.mkdir()
        (folder / "shard").write_text("x")
    clear_leftovers(tmp_path)
    assert not any(path.exists() for path in (*gone, *gone_folders))
    assert all(path.is_file() for path in kept) and all((folder / "shard").is_file() for folder in kept_folders)
    clear_leftovers(tmp_path / "elsewhere")  # no folder there: nothing to clear, no error


def test_the_error_log_holds_the_whole_traceback_or_nothing_where_it_cannot_be_written(tmp_path: Path) -> None:
    def fail() -> None:
        raise RuntimeError("the loss went wrong")

    try:
        fail()
    except RuntimeError as error:
        path, expected = write_error_log(tmp_path, error), "".join(traceback.format_exception(error))
    assert path == tmp_path / ERROR_LOG
    text = path.read_text()
    assert text == expected
    assert text.startswith("Traceback (most recent call last):\n") and "in fail\n" in text
    assert text.endswith("RuntimeError: the loss went wrong\n")
    (tmp_path / "file").write_text("x")
    assert write_error_log(tmp_path / "file", RuntimeError("x")) is None  # under a file: no folder to write in



def test_the_summary_holds_each_figure_under_its_name(tmp_path: Path) -> None:
    config = SimpleNamespace(seed=3, data_seed=4, world_size=2)
    weights = {"w": torch.tensor([0.5, 1.5])}
    summary = write_result(tmp_path, config, torch.device("cpu"), weights, 12, 2.25, {"loss": 0.5, "accuracy": 0.75},
                           "accuracy", {"early_stop_step": 12})
    assert summary == {"seed": 3, "data_seed": 4, "device": "cpu", "weights_sha256": state_dict_sha256(weights),
                       "train_seconds": 2.25, "steps": 12, "world_size": 2, "metrics": ["loss", "accuracy"],
                       "headline_metric": "accuracy", "val_loss": 0.5, "val_accuracy": 0.75, "early_stop_step": 12}
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


@pytest.mark.parametrize(("is_main", "tensorboard"), [(False, True), (True, False), (False, False)])
def test_trackers_are_made_on_rank_0_alone_and_only_when_asked_for(tmp_path: Path, is_main: bool,
                                                                     tensorboard: bool) -> None:
    """Under torchrun every rank calls make_trackers: one writer of events, or each curve once per process."""
    assert make_trackers(SimpleNamespace(tensorboard=tensorboard), tmp_path, is_main) == []
    assert list(tmp_path.iterdir()) == []  # no tensorboard/ folder either


def test_rank_0_asked_for_tensorboard_gets_one_tracker_writing_into_the_run_folder(tmp_path: Path) -> None:
    """The control of the test above: the one case that makes a tracker."""
    pytest.importorskip("tensorboard", reason="tensorboard is the research size's optional extra, not the core's")
    trackers = make_trackers(SimpleNamespace(tensorboard=True), tmp_path, True)
    assert len(trackers) == 1 and (tmp_path / "tensorboard").is_dir()


def test_each_row_tracked_is_in_tensorboards_event_file_at_once_as_a_killed_run_leaves_it(tmp_path: Path,
                                                                                          monkeypatch) -> None:
    """Read back while the writer is still open (a kill would never close it): every figure of the
    row, not the fields that place it (epoch, step, split, the step's lr), under its split, at its
    step. TensorBoard's writer writes its events from a thread of its own, here made slow (a busy
    disk), so that only a tracker that waits for them finds them in the file when it returns."""
    pytest.importorskip("tensorboard", reason="tensorboard is the research size's optional extra, not the core's")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary.writer.record_writer import RecordWriter

    write = RecordWriter.write
    monkeypatch.setattr(RecordWriter, "write", lambda self, data: (time.sleep(0.5), write(self, data))[1])
    (track,) = make_trackers(SimpleNamespace(tensorboard=True), tmp_path, True)
    track({"epoch": 0, "step": 4, "split": "train", "lr": 0.1, "loss": 0.5, "accuracy": 0.25})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["train/accuracy", "train/loss"]
    assert [(event.step, event.value) for event in events.Scalars("train/loss")] == [(4, 0.5)]


def test_tensorboard_asked_for_without_its_package_is_refused_in_one_line_saying_what_to_install(monkeypatch) -> None:
    """Before the run starts, not at make_trackers' import after the run folder is made. The
    package itself is looked for: torch's own wrapper (torch.utils.tensorboard) ships with every torch."""
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # how Python marks a package as not there
    problem = tracking_problem(SimpleNamespace(tensorboard=True))
    assert problem is not None and problem.startswith("--tensorboard needs the tensorboard package: python -m pip "
                                                       "install tensorboard") and "\n" not in problem
    assert tracking_problem(SimpleNamespace(tensorboard=False)) is None  # not asked for: nothing needed


def test_tensorboard_asked_for_with_its_package_there_is_no_problem() -> None:
    """The control of the test above."""
    pytest.importorskip("tensorboard", reason="tensorboard is the research size's optional extra, not the core's")
    assert tracking_problem(SimpleNamespace(tensorboard=True)) is None
