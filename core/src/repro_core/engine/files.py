"""Atomic file writes: a reader, or a kill at any instant, sees the old file or the complete new one.

Every file of a run folder (and of a study folder) is written through these functions. The checks
at the end say, in a few words, why a place cannot be written, so that every command refuses it
with one line before it starts.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Writes through `write(file)` into a temporary file beside `path`, then renames it over `path`.

    The rename is atomic: a reader, or a kill at any instant, sees the old file or the complete
    new one, never a torn one. fsync before the rename makes the bytes durable first; fsync of the
    folder makes the rename itself durable. The temporary file is made with mode 0o666 less the
    process's umask, as open() makes files, so the result has a normal file's permissions.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    if hasattr(os, "O_DIRECTORY"):  # not on Windows, where a folder cannot be opened this way
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda file: file.write(text.encode("utf-8")))


def write_json(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def unwritable_reason(place: Path, error: OSError) -> str:
    """Why nothing could be written at `place`, in a few words. /proc and /sys are named for what
    they are: there, even root's mkdir fails with "No such file or directory", which would send the
    user looking for a missing folder."""
    if Path(place).absolute().parts[1:2] in (("proc",), ("sys",)):
        return "a file system that holds no files"
    return error.strerror or str(error)


def write_problem(folder: Path) -> str | None:
    """Why no file can be written in the existing `folder`; None if one can. It tries, since
    os.access says yes to root everywhere, /proc included."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return unwritable_reason(folder, error)
    return None


def file_in_the_way(path: Path) -> Path | None:
    """The first folder on the way to `path` that exists as a file (`notes.txt` in notes.txt/run)."""
    return next((parent for parent in reversed(path.parents) if parent.exists() and not parent.is_dir()), None)


def file_place_problem(path: Path, flag: str) -> str | None:
    """Why no file can be written at `path`, given on the command line as `flag`, in one line that
    starts with the flag; None if it can be tried."""
    if path.is_dir():
        return f"{flag} {path} is a folder; give a file name in it"
    blocking = file_in_the_way(path)
    if blocking is not None:
        return f"{flag} {path}: {blocking} is a file, not a folder"
    if not path.parent.is_dir():
        return f"{flag} {path}: the folder {path.parent} does not exist"
    problem = write_problem(path.parent)
    return f"{flag} {path}: cannot write there ({problem})" if problem else None


def scratch_problem() -> str | None:
    """Why no scratch folder can be made where temporary files go (verify and doctor train there);
    None if one can."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix="scratch-test-"))
    except OSError as error:  # no usable temporary folder, or one that cannot be written
        where = tempfile.tempdir or os.environ.get("TMPDIR") or "the temporary folder"
        return (f"cannot make a scratch folder in {where} ({unwritable_reason(Path(where), error)}); "
                "set TMPDIR to a folder where files can be written")
    return None
