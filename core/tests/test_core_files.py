"""engine/files.py, reading a run folder back (engine/runs.py) and the run folder's lock
(engine/run_folder.py): a kill mid-write leaves the old file and nothing that blocks the next write;
writers never share a temporary file; JSON floats round-trip; a folder that is no run is named in one
line; one process at a time writes a folder, and a refusal names the one that does.

Children are waited on through their pipes (a line they print when they reach a state), never by
sleeping, and killed by process group.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import BinaryIO

import pytest
import torch
from core_helpers import PYTHON
from repro_core.engine.files import atomic_write, file_place_problem, scratch_problem, write_json
from repro_core.engine.run_folder import (
    MetricsLog,
    beats,
    clear_leftovers,
    lock_folder,
    make_out_dir,
    remove_if_made_empty,
    unlock_folder,
    write_result,
)
from repro_core.engine.runs import Run, RunError, first_divergence, read_json, read_run
from repro_core.utils.repro import state_dict_sha256


def temporaries(target: Path) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.*.tmp"))


class Child:
    """A Python child in its own process group, driven a line at a time through its pipes."""

    def __init__(self, code: str, *args: str) -> None:
        self.process = subprocess.Popen([PYTHON, "-c", textwrap.dedent(code), *args], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)

    def read_line(self) -> str:
        """The child's next line: blocks until it prints one (or dies, then fails with its stderr)."""
        line = self.process.stdout.readline()
        if not line:
            self.kill()
            raise AssertionError(f"child ended early: {self.process.stderr.read()}")
        return line.rstrip("\n")

    def ask(self, command: str) -> str:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read_line()

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()


# --- atomic writes -------------------------------------------------------------------------------------------

STOPPED_WRITER = """
import sys
from pathlib import Path
from repro_core.engine.files import atomic_write

def write(file):
    file.write(b"n" * (4 << 20))  # half of the new content is written...
    file.flush()
    print("writing", flush=True)  # ...the test may kill us now
    sys.stdin.read()  # stopped here until killed
    file.write(b"never")

atomic_write(Path(sys.argv[1]), write)
"""


def test_a_kill_in_the_middle_of_a_write_leaves_the_old_file_and_nothing_that_blocks_the_next(tmp_path: Path) -> None:
    target = tmp_path / "run" / "summary.json"
    target.parent.mkdir()
    target.write_bytes(b"old\n")
    child = Child(STOPPED_WRITER, str(target))
    try:
        assert child.read_line() == "writing"
        (partial,) = temporaries(target)
        assert partial.stat().st_size >= 4 << 20  # the new content was on its way, beside the target
    finally:
        child.kill()
    assert child.process.returncode == -signal.SIGKILL
    assert target.read_bytes() == b"old\n"
    atomic_write(target, lambda file: file.write(b"new\n"))  # the leftover does not block the next write
    assert target.read_bytes() == b"new\n"
    assert temporaries(target) == [partial]
    clear_leftovers(target.parent)  # what a run's end (or resume) removes
    assert temporaries(target) == []
    assert target.read_bytes() == b"new\n"


def test_two_writers_of_one_target_write_through_different_temporary_files(tmp_path: Path) -> None:
    """The second write starts while the first is in its callback: were the temporary name fixed, its
    exclusive create would fail (or both would write one file)."""
    target = tmp_path / "config.json"
    seen: list[list[Path]] = []

    def inner(file: BinaryIO) -> None:
        seen.append(temporaries(target))
        file.write(b"inner")

    def outer(file: BinaryIO) -> None:
        file.write(b"out")
        seen.append(temporaries(target))
        atomic_write(target, inner)
        assert target.read_bytes() == b"inner"
        file.write(b"er")

    atomic_write(target, outer)
    assert target.read_bytes() == b"outer"
    assert len(seen[0]) == 1 and len(seen[1]) == 2 and seen[0][0] in seen[1]
    assert all(re.fullmatch(r"\.config\.json\.[0-9a-f]{8}\.tmp", path.name) for path in seen[1])
    assert temporaries(target) == []


def test_an_exception_while_writing_leaves_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "metrics.csv"
    target.write_bytes(b"old")

    def failing(file: BinaryIO) -> None:
        file.write(b"half")
        raise KeyboardInterrupt  # a BaseException too

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, failing)
    assert target.read_bytes() == b"old" and temporaries(target) == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="no /proc/self/fd to count descriptors in")
def test_writes_that_succeed_or_fail_leave_no_descriptor_open(tmp_path: Path) -> None:
    """A run writes its metrics, checkpoints and records thousands of times: each write must close
    what it opened (the temporary file, and the folder it opens to fsync the rename), or a long run
    dies of "Too many open files"."""
    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    def failing(file: BinaryIO) -> None:
        raise OSError("disk full")

    before = open_descriptors()
    for step in range(20):
        write_json(tmp_path / "sub" / "summary.json", {"step": step})
        with pytest.raises(OSError, match="disk full"):
            atomic_write(tmp_path / "sub" / "checkpoint.pt", failing)
    assert open_descriptors() == before
    assert json.loads((tmp_path / "sub" / "summary.json").read_text()) == {"step": 19}


def test_atomic_write_gives_a_new_file_the_usual_permissions(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a" / "b.txt", lambda file: file.write(b"x"))
    finally:
        os.umask(previous)
    assert (tmp_path / "a" / "b.txt").stat().st_mode & 0o777 == 0o640


def test_a_place_for_a_file_is_refused_in_one_line_that_names_the_flag_and_what_is_in_the_way(
        tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file\n")
    problems = {place: file_place_problem(tmp_path / place, "--json")
                for place in ("figures.json", ".", "notes.txt/figures.json", "missing/figures.json")}
    assert problems["figures.json"] is None  # the control: a file that can be written
    assert problems["."] == f"--json {tmp_path / '.'} is a folder; give a file name in it"
    assert problems["notes.txt/figures.json"] == \
        f"--json {tmp_path / 'notes.txt/figures.json'}: {tmp_path / 'notes.txt'} is a file, not a folder"
    assert problems["missing/figures.json"] == \
        f"--json {tmp_path / 'missing/figures.json'}: the folder {tmp_path / 'missing'} does not exist"
    if Path("/proc/self").is_dir():  # Linux: where even root can write no file
        assert file_place_problem(Path("/proc/figures.json"), "--json") == \
            "--json /proc/figures.json: cannot write there (a file system that holds no files)"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_anything_on_the_way_that_is_no_folder_is_named_as_in_the_way_not_as_a_missing_folder(tmp_path: Path) -> None:
    """A named pipe, or a device (/dev/null/figures.json): as a regular file would, it stands
    where a folder should be; "the folder does not exist" would send the user looking for one."""
    os.mkfifo(tmp_path / "pipe")
    assert file_place_problem(tmp_path / "pipe" / "figures.json", "--json") == \
        f"--json {tmp_path / 'pipe' / 'figures.json'}: {tmp_path / 'pipe'} is a file, not a folder"
    if Path("/dev/null").exists():
        assert file_place_problem(Path("/dev/null/figures.json"), "--json") == \
            "--json /dev/null/figures.json: /dev/null is a file, not a folder"


def test_a_best_figure_beats_every_earlier_one_strictly_and_a_nan_never_counts() -> None:
    assert beats("min:loss", 0.5, [0.7, 0.6]) and not beats("min:loss", 0.6, [0.7, 0.6])  # a tie keeps the earlier
    assert beats("max:accuracy", 0.8, [0.5, 0.75]) and not beats("max:accuracy", 0.7, [0.5, 0.75])
    assert beats("min:loss", 1.0, []) and not beats("min:loss", math.nan, [])
    assert beats("min:loss", 0.9, [math.nan, 1.0])  # an evaluation that went NaN is no record to beat


def test_a_metrics_column_holds_the_rows_before_a_step_including_those_not_yet_flushed(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.csv", ("loss", "accuracy"), rows=0, writes=True)
    log.create()
    with log:
        log.write(0, 4, "train", {"loss": 2.0, "accuracy": 0.1}, lr=0.1)
        log.write(0, 4, "val", {"loss": 1.5, "accuracy": 0.25})
        log.write(1, 8, "val", {"loss": 1.25, "accuracy": 0.5})
        assert log.column("val", "accuracy", before_step=8) == [0.25]
        assert log.column("val", "loss", before_step=9) == [1.5, 1.25]
    # The control: a rank that does not write reads nothing (rank 0 decides for all).
    assert MetricsLog(tmp_path / "metrics.csv", ("loss",), rows=3, writes=False).column("val", "loss", 9) == []


def test_a_refused_run_removes_the_folders_it_made_and_nothing_else(tmp_path: Path) -> None:
    assert make_out_dir(tmp_path / "a" / "b" / "run") is None
    remove_if_made_empty()
    assert list(tmp_path.iterdir()) == []  # from the first folder it had to make on
    (tmp_path / "kept").mkdir()
    assert make_out_dir(tmp_path / "kept" / "run") is None
    (tmp_path / "kept" / "run" / "error.log").write_text("what a failure leaves\n")
    remove_if_made_empty()
    assert (tmp_path / "kept" / "run" / "error.log").exists()  # a folder that holds a file stays
    assert make_out_dir(tmp_path / "kept") is None  # made by someone else: never removed
    remove_if_made_empty()
    assert (tmp_path / "kept").is_dir()


def test_a_made_folder_whose_only_file_lies_deeper_down_stays_with_it(tmp_path: Path) -> None:
    """What counts is every file below the folder it made, not only the folder's own entries: a
    refused run never deletes another's files that lie in a subfolder of it."""
    assert make_out_dir(tmp_path / "shared" / "run") is None  # made shared/ and shared/run/
    (tmp_path / "shared" / "other" / "logs").mkdir(parents=True)
    (tmp_path / "shared" / "other" / "logs" / "notes.txt").write_text("another run's\n")
    remove_if_made_empty()
    assert (tmp_path / "shared" / "other" / "logs" / "notes.txt").read_text() == "another run's\n"


@pytest.mark.parametrize("text", ["[0.5, 0.25]", "3", '"a string"', "null"])
def test_a_run_file_holding_json_that_is_no_object_is_one_line_naming_it(tmp_path: Path, text: str) -> None:
    """verify, compare and study read a run through read_json: a file that holds valid JSON but no
    object (a list, a number) is a RunError, one line, not a traceback further on."""
    path = tmp_path / "summary.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RunError) as raised:
        read_json(path, required=True)
    assert str(raised.value) == f"{path} is corrupt (not a JSON object)"


@pytest.mark.parametrize(("content", "reason"), [
    (b"\xff\xfe{}", "'utf-8' codec can't decode byte 0xff in position 0"),
    (b'{"seed": 4', "Expecting ',' delimiter"),
    (b"", "Expecting value: line 1 column 1 (char 0)"),
], ids=["not UTF-8 (a binary file copied over it)", "cut short", "empty"])
def test_a_run_file_that_is_no_json_is_one_line_saying_it_is_corrupt_and_why(tmp_path: Path, content: bytes,
                                                                               reason: str) -> None:
    """Neither bytes that are no text nor text that is no JSON end verify, compare or study in a
    traceback: read_json says the file is corrupt, and why, in one line."""
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(RunError) as raised:
        read_json(path, required=False)
    assert str(raised.value).startswith(f"{path} is corrupt ({reason}") and "\n" not in str(raised.value)


def test_write_json_round_trips_floats_exactly(tmp_path: Path) -> None:
    floats = [0.1 + 0.2, 1 / 3, 5e-324, 1.7976931348623157e308, -0.0, 2.0**-1074 * 3, 123456789.123456789]
    data = {"loss": floats, "nested": {"lr": 3e-4, "name": "régression"}, "steps": 10}
    path = tmp_path / "summary.json"
    write_json(path, data)
    back = json.loads(path.read_text(encoding="utf-8"))
    assert back == data
    assert [repr(x) for x in back["loss"]] == [repr(x) for x in floats]  # bit for bit, -0.0 included
    assert math.copysign(1.0, back["loss"][4]) == -1.0
    assert "régression" in path.read_text(encoding="utf-8") and path.read_text(encoding="utf-8").endswith("}\n")


@pytest.mark.parametrize("header, piece", [
    ("epoch,step,split,lr,loss,accuracy", None),
    ("epoch,step,split,loss,accuracy", "is a run of the teaching size's train.py (its metrics.csv has no lr column)"),
    ("step,loss", "metrics.csv is corrupt (header"),
], ids=["a research run", "a teaching-size run", "neither"])
def test_read_run_reads_a_run_and_says_in_one_line_what_a_folder_it_cannot_read_is(header: str, piece: str | None,
                                                                                     tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    lr = "0.1," if ",lr," in header else ""
    (tmp_path / "metrics.csv").write_text(f"{header}\n0,1,train,{lr}2.5,0.25\n", encoding="utf-8")
    if piece is None:
        assert read_run(tmp_path).train_losses == ["2.5"]
    else:
        with pytest.raises(RunError) as error:
            read_run(tmp_path)
        assert piece in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("summary", ['{"seed": 1, "steps": 1}', '{"weights_sha256": null}', '{"weights_sha256": 7}'],
                         ids=["no hash", "null", "a number"])
def test_a_summary_without_its_weights_hash_is_refused_in_one_line_not_read_as_finished(summary: str,
                                                                                         tmp_path: Path) -> None:
    """A finished run's summary.json holds the weights hash that verify, compare and study compare:
    one without it (hand-edited, written by another tool) is corrupt, said in one line, rather
    than a finished run whose hash is then missing. The control: with its hash, it reads."""
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "metrics.csv").write_text("epoch,step,split,lr,loss\n0,1,train,0.1,2.5\n", encoding="utf-8")
    (tmp_path / "summary.json").write_text(summary, encoding="utf-8")
    with pytest.raises(RunError) as error:
        read_run(tmp_path)
    assert str(error.value) == f"{tmp_path / 'summary.json'} is corrupt (no weights_sha256)"
    (tmp_path / "summary.json").write_text('{"weights_sha256": "ab12"}', encoding="utf-8")
    assert read_run(tmp_path).summary == {"weights_sha256": "ab12"}


@pytest.mark.parametrize("row", [
    "0,2,test,,2.5,0.25", "0,2,,,2.5,0.25", "0,two,val,,2.5,0.25", "0,2,val,,fast,0.25", "0,2,val,0.1,2.5,0.25",
    "0,2,train,,2.5,0.25", "0,2,val", "0,2,train,0.1,2.5",
], ids=["a split neither train nor val", "no split", "a step that is no integer", "a figure that is no number",
        "a learning rate on a val row", "no learning rate on a train row", "a row cut short (a kill in its write)",
        "a row one figure short"])
def test_a_row_that_is_not_a_metrics_row_is_refused_naming_its_line(row: str, tmp_path: Path) -> None:
    """verify, compare and plot read a run's rows back: a row of another split, or a damaged one,
    is named by its line, not read as a figure of the run."""
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    rows = "epoch,step,split,lr,loss,accuracy\n0,1,train,0.1,2.5,0.25\n"
    (tmp_path / "metrics.csv").write_text(rows + "0,2,val,,2.25,0.5\n", encoding="utf-8")
    assert read_run(tmp_path).train_losses == ["2.5"]  # the well-formed file reads
    (tmp_path / "metrics.csv").write_text(f"{rows}{row}\n", encoding="utf-8")
    with pytest.raises(RunError, match="is corrupt \\(line 3 is not a metrics row\\)"):
        read_run(tmp_path)


FIRST = {"step": 0, "world_size": 2}  # a run's first entry: started on two processes


@pytest.mark.parametrize("history", [
    [FIRST, {"step": "8", "world_size": 4}], [FIRST, {"step": 8, "world_size": "4"}], [FIRST, {"step": 8}],
    [FIRST, {"world_size": 4}], [FIRST, [8, 4]], {"step": 8, "world_size": 4},
    [FIRST, {"step": True, "world_size": 4}], [FIRST, {"step": 8, "world_size": True}],
], ids=["a step that is text", "a world size that is text", "no world size", "no step", "an entry that is a list",
        "no list", "a step that is true", "a world size that is true"])
def test_a_world_size_history_that_is_not_steps_and_world_sizes_is_refused_in_one_line(history: object,
                                                                                       tmp_path: Path) -> None:
    """verify and compare read the steps at which a run's world size changed as numbers: a
    hand-edited world_sizes.json that holds anything else is named, not read as a run's history."""
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "metrics.csv").write_text("epoch,step,split,lr,loss,accuracy\n0,1,train,0.1,2.5,0.25\n")
    good = [FIRST, {"step": 8, "world_size": 4}]
    (tmp_path / "world_sizes.json").write_text(json.dumps({"world_sizes": good}), encoding="utf-8")
    assert read_run(tmp_path).world_sizes == good  # the control: the file as a run writes it
    (tmp_path / "world_sizes.json").write_text(json.dumps({"world_sizes": history}), encoding="utf-8")
    with pytest.raises(RunError) as error:
        read_run(tmp_path)
    assert str(error.value) == f"{tmp_path / 'world_sizes.json'} is corrupt (not a list of steps and world sizes)"


def run_of(*rows: tuple[int, str, str, str]) -> Run:
    """A run read back whose metrics.csv holds `rows`: (step, split, loss, accuracy), as written."""
    metrics = [{"epoch": "0", "step": str(step), "split": split, "lr": "0.1" if split == "train" else "",
                "loss": loss, "accuracy": accuracy} for step, split, loss, accuracy in rows]
    return Run(path=Path("run"), config={}, environment={}, metrics=metrics, metric_names=("loss", "accuracy"),
               summary=None)


def test_the_first_non_finite_step_is_of_a_training_row_not_an_evaluation() -> None:
    """verify and compare say where a run stopped (or skipped, under --nonfinite skip): a training
    step. An evaluation that gave NaN after finite steps stopped no step."""
    finite = [(1, "train", "0.5", "0.25"), (2, "train", "0.4", "0.5")]
    assert run_of(*finite, (2, "val", "nan", "0.5"), (3, "train", "0.3", "0.5")).non_finite_step is None
    assert run_of(*finite, (2, "val", "nan", "nan"), (3, "train", "0.3", "inf")).non_finite_step == 3
    assert run_of((1, "train", "0.5", "0.25"), (2, "train", "-inf", "0.5")).non_finite_step == 2  # any figure


def test_where_two_runs_part_is_the_first_row_and_metric_that_differ_or_the_length_of_their_logs() -> None:
    """What verify and compare say first: any metric of a row, not the loss alone, and a log cut short."""
    rows = [(1, "train", "0.5", "0.25"), (2, "train", "0.4", "0.5"), (2, "val", "0.45", "0.75")]
    assert first_divergence(run_of(*rows), run_of(*rows)) is None  # the control: the same rows
    assert first_divergence(run_of(*rows), run_of(*rows[:2], (2, "val", "0.45", "0.625"))) == \
        "step 2 (val), accuracy: 0.75 vs 0.625"
    assert first_divergence(run_of(*rows), run_of(*rows[:2])) == \
        "one log has 3 rows, the other 2; the shorter one matches up to its end"
    for a, b in ((rows, rows[:2]), (rows[:2], rows)):  # only the first two asked: of both runs, either the longer
        assert first_divergence(run_of(*a), run_of(*b), rows=2) is None
    assert first_divergence(run_of(*rows), run_of(*rows[:2], (2, "val", "0.45", "0.625")), rows=2) is None
    # Figures compare as written, every bit: -0.0 is not 0.0, and a nan where the other run has a nan is the same.
    assert first_divergence(run_of((1, "train", "0.0", "nan")), run_of((1, "train", "-0.0", "nan"))) == \
        "step 1 (train), loss: 0.0 vs -0.0"
    assert first_divergence(run_of((1, "train", "nan", "0.5")), run_of((1, "train", "nan", "0.5"))) is None


# --- the run folder's lock -----------------------------------------------------------------------------------

LOCKER = """
import os
import sys
from pathlib import Path
from repro_core.engine.run_folder import lock_folder, unlock_folder

print(os.getpid(), flush=True)
for line in sys.stdin:
    command, folder = line.split(maxsplit=1)
    folder = Path(folder.strip())
    if command == "lock":
        print(repr(lock_folder(folder)), flush=True)
    else:
        unlock_folder(folder)
        print("unlocked", flush=True)
"""


class Locker(Child):
    """Another process that locks and unlocks folders with lock_folder when asked."""

    def __init__(self) -> None:
        super().__init__(LOCKER)
        self.pid = int(self.read_line())

    def lock(self, folder: Path) -> str | None:
        answer = self.ask(f"lock {folder}")
        return None if answer == "None" else answer

    def unlock(self, folder: Path) -> None:
        assert self.ask(f"unlock {folder}") == "unlocked"


@pytest.fixture(scope="module")
def locker() -> Iterator[Locker]:
    other = Locker()
    yield other
    other.kill()


@pytest.fixture(autouse=True)
def release_this_process_locks() -> Iterator[None]:
    yield
    unlock_folder()


def test_a_second_process_is_refused_while_the_first_holds_the_lock_and_told_who(tmp_path: Path,
                                                                                locker: Locker) -> None:
    assert lock_folder(tmp_path) is None
    assert lock_folder(tmp_path) is None  # this process already holds it
    refusal = locker.lock(tmp_path)
    assert refusal is not None and "is in use" in refusal and f"process {os.getpid()} " in refusal
    unlock_folder(tmp_path)
    assert locker.lock(tmp_path) is None  # released: another process takes it
    mine = lock_folder(tmp_path, "--study")
    assert mine is not None and mine.startswith("--study") and f"process {locker.pid} " in mine
    locker.unlock(tmp_path)
    assert lock_folder(tmp_path) is None


def test_a_lock_taken_by_a_relative_path_is_released_after_a_chdir(tmp_path: Path, locker: Locker,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """As an in-process main() with a relative --out takes and gives back its folder's lock (a test, a
    notebook): released by the relative path it was taken by, by the folder's own path from another
    directory, or with every lock this process holds."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    releases = ((tmp_path, lambda: unlock_folder(Path("run"))), (elsewhere, lambda: unlock_folder(run)),
                (elsewhere, lambda: unlock_folder()))
    for where, release in releases:
        monkeypatch.chdir(tmp_path)
        assert lock_folder(Path("run")) is None
        monkeypatch.chdir(elsewhere)
        assert lock_folder(run) is None  # the same folder, held already: recorded by where it is
        assert locker.lock(run) is not None
        monkeypatch.chdir(where)
        release()
        assert locker.lock(run) is None
        locker.unlock(run)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="no /proc/self/fd to count descriptors in")
def test_a_refused_lock_keeps_no_descriptor_open(tmp_path: Path, locker: Locker) -> None:
    """A notebook, a test or a study that calls main() in-process may be refused again and again
    while another run writes the folder: each refusal must close the folder it opened, or the
    process runs out of descriptors, none of which unlock_folder knows of."""
    assert locker.lock(tmp_path) is None
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        assert "is in use" in lock_folder(tmp_path)
    assert len(os.listdir("/proc/self/fd")) == before
    locker.unlock(tmp_path)
    assert lock_folder(tmp_path) is None  # the control: taken once the other lets go


def test_the_lock_of_a_killed_holder_is_released(tmp_path: Path) -> None:
    holder = Locker()
    try:
        assert holder.lock(tmp_path) is None
        assert lock_folder(tmp_path) is not None
    finally:
        holder.kill()  # SIGKILL: no cleanup of its own runs
    assert lock_folder(tmp_path) is None


def test_the_result_records_the_runs_endings_beside_its_figures_and_the_weights_hash(tmp_path: Path) -> None:
    """write_result: model.pt, then summary.json with the figures, the hash of model.pt's weights
    (computed here from the file) and what the recipe adds (`endings`: an early stop, the best)."""
    config = SimpleNamespace(seed=1, data_seed=2, world_size=1)
    weights = {"w": torch.arange(3.0)}
    endings = {"early_stop_step": 7, "best": {"step": 3}}
    summary = write_result(tmp_path, config, torch.device("cpu"), weights, 7, 1.5, {"loss": 0.25}, "loss", endings)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["early_stop_step"] == 7 and summary["best"] == {"step": 3} and summary["val_loss"] == 0.25
    assert summary["weights_sha256"] == state_dict_sha256(torch.load(tmp_path / "model.pt", weights_only=True))
    plain = write_result(tmp_path, config, torch.device("cpu"), weights, 7, 1.5, {"loss": 0.25}, "loss")
    assert "early_stop_step" not in plain and "best" not in plain  # the control: none unless given


def test_the_scratch_check_leaves_nothing_behind_and_refuses_a_temporary_folder_it_cannot_use(
        tmp_path: Path, monkeypatch) -> None:
    """verify and doctor ask, before they train, whether a scratch folder can be made where temporary
    files go: the check makes one and removes it, so that nothing piles up in /tmp (or a cluster's
    shared TMPDIR) run after run. The control: a temporary folder under a file is refused in one
    line that names it and says what to do."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for _ in range(3):
        assert scratch_problem() is None
    assert sorted(tmp_path.iterdir()) == []
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a-file" / "tmp"))
    problem = scratch_problem()
    assert problem.startswith(f"cannot make a scratch folder in {tmp_path / 'a-file' / 'tmp'} (")
    assert problem.endswith("set TMPDIR to a folder where files can be written") and "\n" not in problem
