"""Atomic file writes: a reader, or a kill at any instant, sees the old file or the complete new one.

Every file of a run folder (and of a study folder) is written through these functions.
"""

from __future__ import annotations

import json
import os
import secrets
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
