"""Specifications of engine/run_folder.py's writers and readers, in this process: each row of
metrics.csv, its cut back on a resume, the leftovers a finished run clears, model.pt and
summary.json, error.log, and the words that name a folder's writer. The tests of the whole runs
(test_train.py, test_resume.py, test_failures.py, test_one_writer.py) see the same through
processes; these see every branch, on whatever task the project holds."""

from __future__ import annotations

import fcntl
import json
import os
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine import run_folder
from {{ cookiecutter.project_slug }}.engine.files import atomic_write
from {{ cookiecutter.project_slug }}.engine.run_folder import (
    ERROR_LOG,
    MetricsLog,
    clear_leftovers,
    lock_folder,
    lock_holder,
    unlock_folder,
    write_error_log,
    write_result,
)
from {{ cookiecutter.project_slug }}.engine.world_sizes import history_on_resume, write_world_sizes
from {{ cookiecutter.project_slug }}.utils.repro import state_dict_sha256

NAMES = ("loss", "accuracy")  # any task's figures: "loss" first, then its metrics
HEADER = "epoch,step,split,lr,loss,accuracy\n"


def test_each_row_holds_its_step_its_learning_rate_and_each_figure_as_the_float_it_was(tmp_path):
    log = MetricsLog(tmp_path / "metrics.csv", NAMES, rows=0, writes=True)
    log.create()
    tracked = []
    log.trackers.append(tracked.append)
    with log:
        log.write(1, 3, "train", {"loss": 0.1, "accuracy": torch.tensor(2 / 3)}, lr=0.001)
        log.write(1, 3, "val", {"accuracy": 1, "loss": 0.25})  # in the names' order, whatever the dict's
    assert (tmp_path / "metrics.csv").read_bytes() == (  # bytes: each line ends in "\n" alone, on any system
        HEADER + f"1,3,train,0.001,0.1,{float(torch.tensor(2 / 3))!r}\n" + "1,3,val,,0.25,1.0\n").encode()
    assert log.rows == 2
    assert [entry["split"] for entry in tracked] == ["train", "val"]
    assert tracked[0]["learning_rate"] == 0.001 and "learning_rate" not in tracked[1]
    assert {key: tracked[1][key] for key in ("epoch", "step", "loss", "accuracy")} == {
        "epoch": 1, "step": 3, "loss": 0.25, "accuracy": 1}


def test_a_reopened_log_appends_after_the_rows_it_holds(tmp_path):
    log = MetricsLog(tmp_path / "metrics.csv", NAMES, rows=0, writes=True)
    log.create()
    for step in (1, 2):  # two processes, one after the other: a run and its resume
        with MetricsLog(tmp_path / "metrics.csv", NAMES, rows=step - 1, writes=True) as log:
            log.write(1, step, "train", {"loss": 0.5, "accuracy": 0.5}, lr=0.1)
    assert (tmp_path / "metrics.csv").read_text() == HEADER + "1,1,train,0.1,0.5,0.5\n1,2,train,0.1,0.5,0.5\n"


def test_a_rank_that_does_not_write_counts_the_rows_and_writes_and_tracks_nothing(tmp_path):
    log = MetricsLog(tmp_path / "metrics.csv", NAMES, rows=5, writes=False)
    tracked = []
    log.trackers.append(tracked.append)
    with log:
        log.write(2, 6, "train", {"loss": 0.5, "accuracy": 0.5}, lr=0.1)
        log.sync()
    assert log.rows == 6 and tracked == [] and not (tmp_path / "metrics.csv").exists()
    assert log.train_losses_of(2) == []


def test_the_rows_are_on_disk_once_synced_before_the_checkpoint_that_counts_them(tmp_path):
    path = tmp_path / "metrics.csv"
    log = MetricsLog(path, NAMES, rows=0, writes=True)
    log.create()
    with log:
        log.write(1, 1, "train", {"loss": 0.5, "accuracy": 0.5}, lr=0.1)
        log.sync()
        assert path.read_text() == HEADER + "1,1,train,0.1,0.5,0.5\n"  # read by another file handle


def metrics_file(tmp_path, *rows: str) -> MetricsLog:
    (tmp_path / "metrics.csv").write_text(HEADER + "".join(rows))
    return MetricsLog(tmp_path / "metrics.csv", NAMES, rows=0, writes=True)


ROW = ["1,1,train,0.1,0.5,0.5\n", "1,2,train,0.1,0.4,0.5\n", "1,2,val,,0.45,0.5\n"]


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_a_resume_keeps_the_rows_its_checkpoint_counts_and_cuts_the_rest(rows, tmp_path):
    log = metrics_file(tmp_path, *ROW)
    log.rows = rows
    assert log.cut_back() is None
    assert log.path.read_text() == HEADER + "".join(ROW[:rows])


@pytest.mark.parametrize("rows", [0, 2])
@pytest.mark.parametrize("torn", ["1,3,tr", "1,3,train,0.1,0.3\n", "1,3,train,0.1,0.3,0.5,9\n"])
def test_a_torn_last_row_is_cut_with_a_note_when_the_checkpoint_counts_the_rows_before_it(torn, rows, tmp_path):
    """A kill tears the row being written: its end (the file's last byte), or its fields."""
    log = metrics_file(tmp_path, *ROW[:rows], torn)
    log.rows = rows
    note = log.cut_back()
    assert log.path.read_text() == HEADER + "".join(ROW[:rows])
    if torn.endswith("\n"):  # a whole line with a wrong number of fields: cut, no note needed
        assert note is None
    else:
        assert note == (f"{log.path} ended in a torn row (written when the run was killed): cut back to the {rows} "
                        "rows its checkpoint counts")


@pytest.mark.parametrize("rows, content, whole", [
    (2, [ROW[0], "1,2,train,0.1\n", ROW[2]], 1),  # a row torn in the middle of the file
    (3, [*ROW[:2], "1,3,tr"], 2),  # the checkpoint counts the torn row
    (4, ROW, 3)])  # rows lost
def test_a_log_with_fewer_whole_rows_than_its_checkpoint_counts_is_refused_and_left_as_it_is(rows, content, whole,
                                                                                             tmp_path):
    log = metrics_file(tmp_path, *content)
    log.rows = rows
    with pytest.raises(ValueError) as refused:
        log.cut_back()
    assert str(refused.value) == (f"{log.path} holds {whole} whole rows, fewer than the {rows} that its checkpoint "
                                  "counts: rows are missing, so the resumed run would leave a gap; start it again "
                                  "with --overwrite")
    assert log.path.read_text() == HEADER + "".join(content)


def test_an_epochs_training_losses_are_read_back_for_a_resume_in_its_middle(tmp_path):
    log = metrics_file(tmp_path, "1,1,train,0.1,0.5,0.5\n", "1,1,val,,0.7,0.5\n", "2,2,train,0.1,0.25,0.5\n",
                       "2,3,train,0.1,0.125,0.5\n", "2,3,val,,0.9,0.5\n")
    assert log.train_losses_of(2) == [0.25, 0.125] and log.train_losses_of(1) == [0.5]
    assert log.train_losses_of(3) == []
    assert MetricsLog(tmp_path / "none.csv", NAMES, rows=0, writes=True).train_losses_of(1) == []  # no file yet


def test_a_finished_run_clears_the_failure_before_it_and_every_interrupted_write_and_nothing_else(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    leftovers = [out / ERROR_LOG, out / ".model.pt.tmp", out / "checkpoints" / ".step_4.pt.tmp"]
    leftover_folders = [out / "checkpoints" / ".step_4.partial", out / "checkpoints" / ".step_2.deleting",
                        out / "checkpoints" / ".step_3.old", out / ".tensorboard.partial"]
    kept = [out / "notes.tmp", out / ".hidden", out / "checkpoints" / ".file.partial", out / "config.json",
            out / "checkpoints" / "step_8.pt"]
    kept_folders = [out / ".cache", out / "checkpoints" / "step_6"]
    for path in leftovers + kept:
        path.write_text("x")
    for folder in leftover_folders + kept_folders:
        (folder / "inside").mkdir(parents=True)
    clear_leftovers(out)
    assert sorted(path for path in out.rglob("*") if "inside" not in path.parts) == sorted(kept + kept_folders + [
        out / "checkpoints"])


@pytest.mark.parametrize("name", ["model.pt", "checkpoints/step_4.pt"])
def test_the_temporary_file_a_kill_leaves_inside_a_write_is_one_the_next_start_clears(tmp_path, name):
    """What a kill inside atomic_write leaves (its temporary file, seen while the write runs) is
    what clear_leftovers removes when the run resumes or finishes, whatever atomic_write names it."""
    out = tmp_path / "run"
    target = out / name
    during = []
    atomic_write(target, lambda file: during.extend(path for path in target.parent.iterdir() if path != target))
    [temporary] = during
    temporary.write_bytes(b"half a file")  # as a kill after the write began leaves it
    clear_leftovers(out)
    assert not temporary.exists() and target.exists()


def test_a_resume_writes_world_sizes_json_only_when_the_world_size_changed(tmp_path):
    """A run that never changed its number of processes has no world_sizes.json; one that did has
    the history from the checkpoint it resumed from, and loses it when it resumes back before it."""
    checkpoint = {"step": 8, "epoch": 1, "epoch_step": 0}
    assert history_on_resume([], 2, checkpoint, 2) == []  # resumed with as many processes: no file
    changed = history_on_resume([], 2, checkpoint, 3)
    assert changed == [{"step": 0, "world_size": 2}, {**checkpoint, "world_size": 3}]
    assert history_on_resume(changed, 2, {"step": 12, "epoch": 1, "epoch_step": 4}, 3) == changed
    assert history_on_resume(changed, 2, {"step": 4, "epoch": 0, "epoch_step": 4}, 2) == []  # back before it
    # Resumed from the very checkpoint of the change: what the run did from there on is done again.
    again = history_on_resume(changed, 2, checkpoint, 4)
    assert again == [{"step": 0, "world_size": 2}, {**checkpoint, "world_size": 4}]
    assert history_on_resume(changed, 2, checkpoint, 2) == []
    write_world_sizes(tmp_path, changed)
    assert json.loads((tmp_path / "world_sizes.json").read_text()) == {"world_sizes": changed}
    write_world_sizes(tmp_path, [])
    assert not (tmp_path / "world_sizes.json").exists()


def test_a_leftover_that_cannot_be_removed_or_is_gone_meanwhile_does_not_fail_a_finished_run(tmp_path, monkeypatch):
    """Stand-ins for the removals: one fails (a folder of another user's files), one finds nothing."""
    (tmp_path / ".step_4.partial").mkdir()
    (tmp_path / ".model.pt.tmp").write_text("x")

    def rmtree(path, ignore_errors=False):
        if not ignore_errors:
            raise PermissionError(path)

    def unlink(path, missing_ok=False):
        if not missing_ok:
            raise FileNotFoundError(path)

    monkeypatch.setattr(run_folder.shutil, "rmtree", rmtree)
    monkeypatch.setattr(type(tmp_path), "unlink", unlink)
    clear_leftovers(tmp_path)


def test_a_run_ends_by_writing_its_weights_and_its_summary_and_clearing_its_leftovers(tmp_path):
    (tmp_path / ERROR_LOG).write_text("an earlier failure")
    config = Config(seed=5, data_seed=9)
    weights = {"w": torch.tensor([1.0, 2.0]), "steps": torch.tensor(3)}
    summary = write_result(tmp_path, config, torch.device("cpu"), weights, steps=12, seconds=4.5,
                           figures={"loss": 0.25, "accuracy": 0.75}, headline="accuracy")
    assert summary == {"seed": 5, "data_seed": 9, "device": "cpu", "weights_sha256": state_dict_sha256(weights),
                       "train_seconds": 4.5, "steps": 12, "world_size": 1, "metrics": ["loss", "accuracy"],
                       "headline_metric": "accuracy", "val_loss": 0.25, "val_accuracy": 0.75}
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    loaded = torch.load(tmp_path / "model.pt", weights_only=True)
    assert state_dict_sha256(loaded) == summary["weights_sha256"]
    assert not (tmp_path / ERROR_LOG).exists()


def test_a_failure_writes_its_whole_traceback_to_error_log_or_says_it_could_not(tmp_path):
    try:
        raise RuntimeError("the task's model failed") from KeyError("cause")
    except RuntimeError as raised:
        error = raised
    assert write_error_log(tmp_path, error) == tmp_path / ERROR_LOG
    assert (tmp_path / ERROR_LOG).read_text() == "".join(traceback.format_exception(error))
    assert "KeyError: 'cause'" in (tmp_path / ERROR_LOG).read_text()  # the cause too
    (tmp_path / "a file").write_text("")
    assert write_error_log(tmp_path / "a file", error) is None  # a run folder that is no folder: no place for it


def proc_files(monkeypatch, files: dict[str, object]) -> None:
    """A stand-in for /proc: the files given, and no other."""
    def read(path: str):
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    monkeypatch.setattr(run_folder, "Path", lambda path: SimpleNamespace(read_text=lambda: read(str(path)),
                                                                        read_bytes=lambda: read(str(path))))


def device_of(folder) -> str:
    """As /proc/locks names a file: MAJOR:MINOR:INODE, the device's numbers in hexadecimal."""
    info = folder.stat()
    return f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"


@pytest.mark.parametrize("command, named", [
    (b"python\0-m\0my_project\0--out\0runs/a\0", "process 4242 (python -m my_project --out runs/a)"),
    (b"", "process 4242"),  # a process that has just ended has no command line
    (b"python\0caf\xe9.py\0", "process 4242 (python caf\ufffd.py)"),  # a name in another encoding than UTF-8
    (b"python\0" + b"x" * 200 + b"\0", "process 4242 (python " + "x" * 113 + ")")])  # 120 characters of it
def test_the_writer_of_a_folder_is_named_by_its_process_id_and_command(command, named, tmp_path, monkeypatch):
    here = device_of(tmp_path)
    proc_files(monkeypatch, {
        "/proc/locks": (f"1: POSIX  ADVISORY  WRITE 1111 {here} 0 EOF\n"  # another kind of lock, on this folder
                        f"2: FLOCK  ADVISORY  WRITE 2222 00:00:1 0 EOF\n"  # a flock on another file
                        f"3: FLOCK  ADVISORY  WRITE 4242 {here} 0 EOF\n"),
        "/proc/4242/cmdline": command})
    assert lock_holder(tmp_path) == named


@pytest.mark.parametrize("files", [{}, {"/proc/locks": "1: FLOCK  ADVISORY  WRITE 2222 00:00:1 0 EOF\n"}],
                         ids=["no /proc (macOS)", "no lock listed"])
def test_a_writer_that_proc_does_not_name_is_another_process(files, tmp_path, monkeypatch):
    proc_files(monkeypatch, files)
    assert lock_holder(tmp_path) == "another process"


def test_the_writer_this_process_is_named_from_the_real_proc_locks(tmp_path):
    if not os.path.exists("/proc/locks"):
        pytest.skip("no /proc/locks on this system: the writer is 'another process'")
    assert lock_folder(tmp_path) is None
    try:
        with open("/proc/self/cmdline", "rb") as file:
            command = " ".join(file.read().decode(errors="replace").replace("\0", " ").split())
        assert lock_holder(tmp_path) == f"process {os.getpid()} ({command[:120]})"
    finally:
        unlock_folder(tmp_path)


def test_a_folder_that_holds_a_run_is_refused_naming_its_run_files_and_the_three_ways_on(tmp_path):
    for name in ("config.json", "metrics.csv"):
        (tmp_path / name).write_text("")
    assert run_folder.out_dir_refusal(tmp_path, overwrite=False) == (
        f"--out {tmp_path} already holds a run (config.json, metrics.csv); pass --resume to continue it, "
        "--overwrite to replace it, or choose another --out")
    assert run_folder.out_dir_refusal(tmp_path, overwrite=True) is None


def test_a_folder_this_user_may_not_write_in_is_refused(tmp_path, monkeypatch):
    """A stand-in for os.access (root may write anywhere): writing, and entering, are both needed."""
    monkeypatch.setattr(run_folder.os, "access", lambda path, mode: not mode & (os.W_OK | os.X_OK))
    assert run_folder.out_dir_refusal(tmp_path / "run", overwrite=False) == (
        f"--out {tmp_path / 'run'}: cannot write in {tmp_path}")


@pytest.mark.parametrize("limit", [20, None])
def test_a_name_longer_than_the_file_system_allows_is_refused_in_one_line(limit, monkeypatch):
    """A stand-in for os.pathconf: a file system of 20-byte names, and one that does not say (255)."""
    def pathconf(path, name):
        if name != "PC_NAME_MAX" or limit is None:
            raise ValueError(name)
        return limit

    monkeypatch.setattr(run_folder.os, "pathconf", pathconf)
    most = limit or 255
    assert run_folder.name_problem(Path("runs") / ("a" * most) / "b") is None
    long_out = Path("runs") / ("é" * most)  # two bytes a letter in UTF-8: the limit is in bytes
    assert run_folder.name_problem(long_out) == (
        f"--out {str(long_out)[:40]}...: the name {'é' * 16}... is {2 * most} bytes long, over this file system's "
        f"limit of {most}")
    assert run_folder.name_problem(Path("runs") / ("a" * (most + 1))) is not None


def test_an_out_folder_that_cannot_be_made_or_written_in_is_refused_with_the_reason(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text("")
    out = tmp_path / "notes.txt" / "run"
    assert run_folder.make_out_dir(out) == f"--out {out}: cannot write there (Not a directory)"
    monkeypatch.setattr(run_folder, "write_problem", lambda folder: f"read-only file system at {folder.name}")
    assert run_folder.make_out_dir(tmp_path / "run") == (
        f"--out {tmp_path / 'run'}: cannot write there (read-only file system at run)")
    monkeypatch.setattr(run_folder, "write_problem", lambda folder: None)
    assert run_folder.make_out_dir(tmp_path / "run") is None


def held_by_another(folder) -> bool:
    """Whether another open file of `folder` (as another process would have) is refused its lock."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False


def test_a_folder_locked_by_this_process_is_held_until_it_unlocks_it_and_no_child_inherits_the_lock(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    try:
        assert lock_folder(first) is None and lock_folder(first) is None  # again: it holds it already
        assert lock_folder(second, "study") is None
        assert held_by_another(first) and held_by_another(second)
        descriptor = run_folder._held_locks[first.resolve()]
        assert fcntl.fcntl(descriptor, fcntl.F_GETFD) & fcntl.FD_CLOEXEC  # a training child does not hold it
        unlock_folder(first)
        assert not held_by_another(first) and held_by_another(second)
    finally:
        unlock_folder()
    assert not held_by_another(second)


@pytest.mark.parametrize("what", ["--out", "study"])
def test_a_folder_another_writer_holds_is_refused_naming_it(what, tmp_path):
    descriptor = os.open(tmp_path, os.O_RDONLY)  # another writer: another open file of the folder
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    try:
        assert (lock_folder(tmp_path) if what == "--out" else lock_folder(tmp_path, what)) == (
            f"{what} {tmp_path.resolve()} is in use: {lock_holder(tmp_path)} is writing to it; wait for it to end, "
            "or stop it, or choose another folder")
        assert tmp_path.resolve() not in run_folder._held_locks
    finally:
        os.close(descriptor)
