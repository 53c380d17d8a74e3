"""What every command shares on its command line: its name, and one line and exit 2 for a mistake.

A user's mistake (a bad flag, a missing folder, an unwritable place) gets one line on stderr,
`python -m <package>.<command>: error: ...`, and exit 2, like argparse's own errors: never a
traceback, never the usage block.

What a run reports as it goes goes through the standard library's `logging`, to the logger named
after the package (`logger` below): progress at INFO on stdout, warnings and notes at WARNING on
stderr, each checkpoint at DEBUG; `--log-level` chooses how much is shown. Under torchrun, rank 0
speaks for all processes (an error shows from every rank).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from .startup import platform_problem

PACKAGE = "{{ cookiecutter.project_slug }}"
# The commands that train, or start training processes: POSIX only (see startup.platform_problem).
# compare and plot read run folders and work anywhere.
POSIX_ONLY_COMMANDS = ("train", "study", "verify", "doctor", "evaluate")  # evaluate: the relaunch (execv)


LOG_LEVELS = ("debug", "info", "warning", "error")
logger = logging.getLogger(PACKAGE)


class ConsoleHandler(logging.Handler):
    """Each line as the commands printed it before logging: INFO and DEBUG on stdout, WARNING and
    above on stderr; the stream looked up for each line (a test or a notebook may swap it), and
    written past tqdm's progress bar so that the bar is drawn again below it."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm  # here: the commands that read runs never import it

        stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        tqdm.write(self.format(record), file=stream)
        stream.flush()  # a line is seen when it is logged, even through a pipe


class MainProcessOnly(logging.Filter):
    """Under torchrun every process runs the same code: only rank 0's lines are shown (every
    process's errors are)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or int(os.environ.get("RANK", "0")) == 0


def configure_logging(level: str) -> None:
    """`logger` at `level` (one of LOG_LEVELS), with the console handler once. Its lines are the
    command's output: they do not propagate to the root logger (whose handlers would print them
    again); add a handler of your own to `logger` to also keep them in a file."""
    logger.setLevel(level.upper())
    if not any(isinstance(handler, ConsoleHandler) for handler in logger.handlers):
        handler = ConsoleHandler()
        handler.addFilter(MainProcessOnly())
        logger.addHandler(handler)
    logger.propagate = False


def prog(command: str) -> str:
    """How a command is typed: `python -m <package>.<command>`."""
    return f"python -m {PACKAGE}.{command}"


def import_error_line(error: ImportError) -> str:
    """One line for an ImportError of task.py. A name of this package that is not where it looks:
    where it is now, found in the package's own files (what moved when: the template's CHANGELOG.md);
    `from .engine.repro import seed_everything` -> "...: it is now in <package>.utils.repro". A package
    that is not installed: where a task's own packages go."""
    wanted, name = error.name or "", None
    if isinstance(error, ModuleNotFoundError) and not wanted.startswith(f"{PACKAGE}."):
        return (f"task.py needs the package {wanted.split('.')[0]!r}, which is not installed here: list it in "
                "requirements-task.txt and run python -m pip install -r requirements-task.txt")
    match = re.match(r"cannot import name '(\w+)' from '([\w.]+)'", str(error))
    if match:
        name, wanted = match.groups()
    elif not isinstance(error, ModuleNotFoundError):
        wanted = ""  # a circular import, say: Python's own line says it
    if not wanted.startswith(f"{PACKAGE}."):
        return "task.py cannot be imported: " + " ".join(str(error).split())
    package = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join((PACKAGE, *path.relative_to(package).with_suffix("").parts))
        if name is None and path.stem == wanted.rsplit(".", 1)[-1] and module != wanted:
            found.append(module)  # the module moved
        elif name is not None and module != wanted and re.search(rf"^(?:def|class) {name}\b|^{name} *[:=]",
                                                                  path.read_text(encoding="utf-8"), re.M):
            found.append(module)  # the name moved to another module
    what = f"{name} from {wanted}" if name else wanted
    where = f"it is now in {' or '.join(found)}" if found else f"{PACKAGE} has no such name"
    return f"task.py imports {what}, which is not there: {where} (CHANGELOG.md says what moved)"


def refuse(command: str, message: str) -> NoReturn:
    """One line on stderr and exit 2."""
    print(f"{prog(command)}: error: {message}", file=sys.stderr)
    sys.exit(2)


def run_command(command: str, main: Callable[[], int]) -> int:
    """A command's main(), as `python -m` runs it: Ctrl-C ends it with one line and exit status
    130 (128 + SIGINT, as a shell reports it), never a KeyboardInterrupt traceback. What a run
    in progress does with Ctrl-C (finish the step, write a checkpoint) is train's own. A command
    that trains refuses in one line on a system that is not POSIX (startup.platform_problem)."""
    problem = platform_problem() if command in POSIX_ONLY_COMMANDS else None
    if problem is not None:
        refuse(command, problem)
    try:
        code = main()
        sys.stdout.flush()  # a reader that stopped early (`| head`) shows here, not as Python exits
        return code
    except KeyboardInterrupt:
        print(f"\n{prog(command)}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the output's reader stopped early: its choice, not an error to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to write, at exit either
        return 141  # 128 + SIGPIPE, as a shell reports a writer whose reader left


def make_parser(command: str, description: str) -> argparse.ArgumentParser:
    """An ArgumentParser whose errors are one line and exit 2. allow_abbrev=False: `--epoch` must
    not quietly mean `--epochs`."""
    parser = argparse.ArgumentParser(prog=prog(command), description=description, allow_abbrev=False)
    parser.error = lambda message: refuse(command, message)
    return parser
