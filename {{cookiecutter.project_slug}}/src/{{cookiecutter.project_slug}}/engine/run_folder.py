"""Writing a run folder: every file a run writes, and the checks before it writes any.

    config.json       every setting of the run (config.Config: the single source of truth)
    environment.json  versions, devices, determinism flags and environment variables in effect
    metrics.csv       one row per optimizer step (split=train) and per evaluation (split=val):
                      epoch, step, split, lr (the learning rate the step took; empty in a
                      val row), loss, then each metric the task names
    checkpoints/      the last few checkpoints, for --resume (files; folders of shards under FSDP)
    world_sizes.json  only if a --resume changed the number of processes: from which step (world_sizes.py)
    fingerprint.json  only under --cpu-kernels portable: this CPU's digests of the operations the run
                      depends on, at fixed inputs (fingerprint.py), for verify on another machine
    tensorboard/      with --tensorboard: the same metrics as TensorBoard event files
    best.pt           with --keep-best: the state_dict of the evaluation whose figure beat every earlier one
    best.json         ... and which evaluation that was: epoch, step, its figures, weights_sha256
    model.pt          the final state_dict (load it with torch.load(..., weights_only=True))
    summary.json      seeds, device, weights_sha256, train_seconds and the final evaluation
    error.log         the full traceback, when the run stopped on an error

Metrics are written as repr() of each float, which round-trips exactly: runs.py reads them back
as those strings, so "equal" means equal bit for bit.
"""

from __future__ import annotations

import csv
import math
import os
import shutil
import traceback
from pathlib import Path

import torch

from ..utils.repro import state_dict_sha256
from .files import atomic_write, atomic_write_text, unwritable_reason, write_json, write_problem

# The files that make a folder hold a run: a new run refuses such a folder without --overwrite.
BEST_MODEL, BEST_RECORD = "best.pt", "best.json"  # --keep-best: the best evaluation's model, and which it was
EVALUATIONS = "evaluations"  # what a research project's evaluate command scored afterwards, one file each
RUN_FILES = ("config.json", "environment.json", "metrics.csv", "model.pt", "summary.json", "checkpoints", "tensorboard",
             "world_sizes.json", "fingerprint.json", BEST_MODEL, BEST_RECORD, EVALUATIONS)
ERROR_LOG = "error.log"  # not a run on its own: a rerun takes over a folder that holds only this
ROW_FIELDS = ("epoch", "step", "split", "lr")  # lr: the step's learning rate; empty in a val row
# What no figure of a task may be named: metrics.csv's own columns, and learning_rate, lr's name in
# the rows that trackers get (a figure of that name would be overwritten there by the rate).
RESERVED_NAMES = (*ROW_FIELDS, "learning_rate")
SPLITS = ("train", "val")


def out_dir_refusal(out: Path, overwrite: bool) -> str | None:
    """Why a new run may not go into `out`, or None. Looks only; never touches a run."""
    existing_parent = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not existing_parent.is_dir():
        return f"--out {out}: {existing_parent} exists and is not a folder"
    if not os.access(existing_parent, os.W_OK | os.X_OK):
        return f"--out {out}: cannot write in {existing_parent}"
    existing = [name for name in RUN_FILES if (out / name).exists()]
    if existing and not overwrite:
        return (f"--out {out} already holds a run ({', '.join(existing)}); "
                "pass --resume to continue it, --overwrite to replace it, or choose another --out")
    return None


def name_problem(out: Path) -> str | None:
    """Why one of the names in --out is longer than the file system allows, as one line, or None.
    Asked before anything else: the file system answers any other question about such a path
    with an OSError of its own."""
    try:
        limit = os.pathconf(Path.cwd().anchor, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    for name in out.parts:
        if len(os.fsencode(name)) > limit:
            return (f"--out {str(out)[:40]}...: the name {name[:16]}... is {len(os.fsencode(name))} bytes long, over "
                    f"this file system's limit of {limit}")
    return None


_made_here: list[Path] = []  # the first folder on the way to --out that make_out_dir created, if any


def make_out_dir(out: Path) -> str | None:
    """Creates `out` and checks that a file can be written there (os.access says yes for root even
    in /proc); the reason as one line if not. Touches no run file. Notes the first folder it had
    to create, for remove_if_made_empty."""
    made = None
    try:
        for folder in (*reversed(out.absolute().parents), out.absolute()):
            try:
                folder.mkdir()  # one level at a time: a folder another process made at once is not ours
            except FileExistsError:
                continue
            made = made or folder
    except OSError as error:
        return f"--out {out}: cannot write there ({unwritable_reason(out, error)})"
    finally:
        if made is not None:
            _made_here.append(made)
    if not out.is_dir():
        return f"--out {out}: {out} exists and is not a folder"
    problem = write_problem(out)
    return f"--out {out}: cannot write there ({problem})" if problem else None


def remove_if_made_empty() -> None:
    """Removes the folders make_out_dir created for a run that was then refused before it wrote a
    file: a refusal leaves the disk as it found it. A folder that holds a file stays."""
    while _made_here:
        made = _made_here.pop()
        if made.is_dir() and not any(path.is_file() or path.is_symlink() for path in made.rglob("*")):
            shutil.rmtree(made, ignore_errors=True)


def clear_run_files(out: Path) -> None:
    """Removes the files of an earlier run (and only those: other files in `out` stay)."""
    for name in (*RUN_FILES, ERROR_LOG):
        if (out / name).is_dir():
            shutil.rmtree(out / name)
        elif (out / name).exists():
            (out / name).unlink()


_held_locks: dict[Path, int] = {}  # the folders this process writes, and the open descriptor that locks each


def lock_folder(folder: Path, what: str = "--out") -> str | None:
    """Makes this process the one writer of `folder` for as long as it lives, or says, as one line,
    which process already is. An advisory lock (flock) on the folder itself, as pip and git guard
    their state: the kernel releases it when the holder dies, by SIGKILL too, so a crashed run never
    leaves the folder locked. Nothing is written: the lock is no file."""
    import fcntl  # POSIX only (Linux, macOS): imported here, so that the package imports on Windows

    folder = folder.resolve()
    if folder in _held_locks:
        return None
    descriptor = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return (f"{what} {folder} is in use: {lock_holder(folder)} is writing to it; wait for it to end, or stop "
                "it, or choose another folder")
    _held_locks[folder] = descriptor
    return None


def unlock_folder(folder: Path | None = None) -> None:
    """Lets another process write to `folder` (None: every folder this process locked): the end
    of a run in this process, when main() called in-process (by a test, a notebook) returns or
    refuses, and the process goes on."""
    for held in [folder.resolve()] if folder is not None else list(_held_locks):
        descriptor = _held_locks.pop(held, None)
        if descriptor is not None:
            os.close(descriptor)


def lock_holder(folder: Path) -> str:
    """The process that holds `folder`'s lock, as a few words: its id and command where Linux's
    /proc/locks says; else 'another process'."""
    info = folder.stat()
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        pids = [line.split()[4] for line in Path("/proc/locks").read_text().splitlines()
                if "FLOCK" in line and line.split()[5] == device]
        # cmdline holds the arguments each ended by a NUL byte, which str.split() keeps
        arguments = Path(f"/proc/{pids[0]}/cmdline").read_bytes().decode(errors="replace").split("\0")
        command = " ".join(" ".join(arguments).split())
    except (OSError, IndexError):
        return "another process"
    return f"process {pids[0]} ({command[:120]})" if command else f"process {pids[0]}"


class MetricsLog:
    """metrics.csv, appended a row at a time: epoch, step, split, then the figures ('loss' first,
    then the task's metrics). Every rank counts the rows; only rank 0 writes, and hands each row
    to its trackers (tracking.py) too."""

    def __init__(self, path: Path, names: tuple[str, ...], rows: int, writes: bool) -> None:
        self.path, self.names, self.rows, self.writes = path, names, rows, writes
        self.trackers: list = []
        self.file = None

    def create(self) -> None:
        """A new file with just the header."""
        atomic_write_text(self.path, ",".join((*ROW_FIELDS, *self.names)) + "\n")

    def cut_back(self) -> str | None:
        """Keeps the header and the first `rows` rows: those a checkpoint had seen. Rows written
        after it, possibly torn by a kill, are written again by the resumed run. Returns a note when
        the file ended in a torn row; ValueError (one line) when it holds fewer whole rows than the
        checkpoint counts (a deleted file holds none): the resumed run would leave a gap, or append
        to a torn row; or when the count is below 0, which no run writes (lines[:0] would cut all)."""
        if self.rows < 0:
            raise ValueError(f"its checkpoint counts {self.rows} rows of {self.path}, a number no run writes")
        try:
            with open(self.path, newline="", encoding="utf-8") as file:
                lines = file.read().splitlines(keepends=True)
        except FileNotFoundError:
            lines = []
        fields = len(ROW_FIELDS) + len(self.names)
        whole = next((i for i, line in enumerate(lines[1:]) if not line.endswith("\n")
                      or len(line.rstrip("\n").split(",")) != fields), max(len(lines) - 1, 0))
        if whole < self.rows:
            raise ValueError(f"{self.path} holds {whole} whole rows, fewer than the {self.rows} that its checkpoint "
                             "counts: rows are missing, so the resumed run would leave a gap; start it again with "
                             "--overwrite")
        atomic_write_text(self.path, "".join(lines[: 1 + self.rows]))
        if len(lines) > 1 and not lines[-1].endswith("\n"):
            return (f"{self.path} ended in a torn row (written when the run was killed): cut back to the "
                    f"{self.rows} rows its checkpoint counts")
        return None

    def train_losses_of(self, epoch: int) -> list[float]:
        """The training losses that metrics.csv holds for `epoch` (rank 0's file): a run resumed in
        the middle of an epoch starts the epoch's mean from the steps taken before it stopped."""
        if not self.writes or not self.path.exists():
            return []
        with open(self.path, newline="", encoding="utf-8") as file:
            return [float(row["loss"]) for row in csv.DictReader(file)
                    if row["split"] == "train" and int(row["epoch"]) == epoch]

    def column(self, split: str, name: str, before_step: int) -> list[float]:
        """The figure `name` of every `split` row before step `before_step`, as metrics.csv holds
        them (the rows a resume cut back included); [] on a rank that does not write."""
        if not self.writes or not self.path.exists():
            return []
        if self.file is not None:
            self.file.flush()
        with open(self.path, newline="", encoding="utf-8") as file:
            return [float(row[name]) for row in csv.DictReader(file)
                    if row["split"] == split and int(row["step"]) < before_step]

    def __enter__(self) -> MetricsLog:
        if self.writes:
            self.file = open(self.path, "a", newline="", encoding="utf-8")
        return self

    def __exit__(self, *exc_info) -> None:
        if self.file is not None:
            self.file.close()

    def write(self, epoch: int, step: int, split: str, figures: dict[str, float], lr: float | None = None) -> None:
        """A row: a training step's (with the learning rate it took) or an evaluation's (lr None)."""
        if self.file is not None:
            # repr() of a float round-trips exactly, so two runs compare bit for bit.
            values = [repr(float(figures[name])) for name in self.names]
            csv.writer(self.file, lineterminator="\n").writerow([epoch, step, split, "" if lr is None else
                                                                 repr(float(lr)), *values])
            for tracker in self.trackers:
                tracker({"epoch": epoch, "step": step, "split": split, **figures,
                         **({} if lr is None else {"learning_rate": float(lr)})})
        self.rows += 1

    def sync(self) -> None:
        """Puts the rows on disk: a checkpoint that counts them is written after this."""
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())


def beats(keep_best: str, value: float, earlier: list[float]) -> bool:
    """Whether `value`, of the figure that `keep_best` names (min:NAME or max:NAME), beats every
    earlier one: strictly (a tie keeps the earlier model), and a NaN never beats nor is beaten."""
    if math.isnan(value):
        return False
    lower = keep_best.split(":", 1)[0] == "min"
    return all(value < other if lower else value > other for other in earlier if not math.isnan(other))


def write_best(out: Path, weights: dict, record: dict) -> None:
    """best.pt, the model's state_dict, then best.json, what it scored and where (each written
    whole or not at all; a kill between the two leaves a best.json that names the model before,
    and the resumed run evaluates that step again and writes both)."""
    atomic_write(out / BEST_MODEL, lambda file: torch.save(weights, file))
    write_json(out / BEST_RECORD, {**record, "weights_sha256": state_dict_sha256(weights)})


def clear_leftovers(out: Path) -> None:
    """Removes what no longer describes the run: an earlier failure's error.log, and the hidden
    temporary files and folders of writes a kill interrupted (atomic writes, sharded checkpoints)."""
    (out / ERROR_LOG).unlink(missing_ok=True)
    for folder in (out, out / "checkpoints"):
        for leftover in folder.glob(".*"):
            if leftover.is_dir() and leftover.name.endswith((".partial", ".deleting", ".old")):
                shutil.rmtree(leftover, ignore_errors=True)
            elif leftover.name.endswith(".tmp"):
                leftover.unlink(missing_ok=True)


def write_result(out: Path, config, device: torch.device, weights: dict, steps: int, seconds: float,
                 figures: dict[str, float], headline: str, endings: dict | None = None) -> dict:
    """model.pt and summary.json, the last files a run writes; returns the summary. `endings`:
    what else the summary records (the best evaluation, an early stop). What an earlier failure
    left (error.log, temporary files) goes: the run has finished."""
    summary = {"seed": config.seed, "data_seed": config.data_seed, "device": str(device),
               "weights_sha256": state_dict_sha256(weights), "train_seconds": seconds, "steps": steps,
               "world_size": config.world_size, "metrics": list(figures), "headline_metric": headline,
               **{f"val_{name}": value for name, value in figures.items()}, **(endings or {})}
    atomic_write(out / "model.pt", lambda file: torch.save(weights, file))
    write_json(out / "summary.json", summary)
    clear_leftovers(out)
    return summary


def write_error_log(out: Path, error: BaseException) -> Path | None:
    """The whole traceback of `error` into the run folder's error.log; None if it cannot be written."""
    path = out / ERROR_LOG
    try:
        atomic_write_text(path, "".join(traceback.format_exception(error)))
    except OSError:
        return None
    return path
