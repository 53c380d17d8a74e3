"""Every command against every bad place: one line on stderr, exit status 2, nothing written.

Each command (train, study, plot, verify, compare, evaluate, doctor) is called through its main(), in this
process, with an output place that cannot be written or does not exist, an input that is missing,
and an input of the wrong kind (a file for a folder, a corrupt run or study). Each is refused before
anything runs, so nothing here trains; the run folder they are given is made by hand.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }} import compare, doctor, evaluate, plot, study, train, verify
from {{ cookiecutter.project_slug }}.config import Config

from conftest import PACKAGE

COMMANDS = {"train": train, "study": study, "plot": plot, "verify": verify, "compare": compare, "evaluate": evaluate,
            "doctor": doctor}
NO_FILES = "/proc/no-files"  # a place where not even root can write a file (on Linux; elsewhere, missing)


def make_places(root: Path) -> dict[str, Path]:
    """A finished run folder, a file, a missing path, a corrupt run, a run whose config.json was edited
    by hand into a value no flag takes, and a corrupt study, inside `root`."""
    run = root / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(Config().to_dict()))
    (run / "environment.json").write_text("{}")
    (run / "metrics.csv").write_text("epoch,step,split,lr,loss\n0,1,train,0.1,2.5\n0,2,train,0.1,2.25\n0,2,val,,2.0\n")
    (run / "summary.json").write_text(json.dumps({"weights_sha256": "0" * 64, "steps": 2, "val_loss": 2.0}))
    corrupt_run = root / "corrupt_run"
    corrupt_run.mkdir()
    (corrupt_run / "config.json").write_text("{not json")
    edited_run = shutil.copytree(run, root / "edited_run")
    (edited_run / "config.json").write_text(json.dumps({**Config().to_dict(), "lr": "fast"}))
    corrupt_study = root / "corrupt_study"
    corrupt_study.mkdir()
    (corrupt_study / "study.json").write_text("{not json")
    (root / "notes.txt").write_text("a file, not a folder\n")
    teaching_run = shutil.copytree(run, root / "teaching_run")  # as the teaching size's train.py writes it
    (teaching_run / "metrics.csv").write_text("epoch,step,split,loss,accuracy\n0,1,train,2.5,0.25\n0,1,val,2.0,0.5\n")
    return {"run": run, "file": root / "notes.txt", "missing": root / "missing", "corrupt_run": corrupt_run,
            "edited_run": edited_run, "corrupt_study": corrupt_study, "teaching_run": teaching_run}


# command -> case -> (its arguments, with the places of make_places ({run}, {file}, {missing}, ...) filled
# in; a piece of the one line it must print). "scratch" cases: no temporary folder can be made.
CASES = {
    "train": {
        "out where nothing can be written": (["--out", NO_FILES], f"--out {NO_FILES}"),
        "out through a file": (["--out", "{file}/run"], "is not a folder"),
        "resume a missing run": (["--out", "{missing}", "--resume"], "does not exist"),
        "resume a file": (["--out", "{file}", "--resume"], "is a file, not a run folder"),
        "resume a corrupt run": (["--out", "{corrupt_run}", "--resume"], "config.json is corrupt"),
        "resume a hand-edited run": (["--out", "{edited_run}", "--resume"],
                                     "config.json: its lr is 'fast', which is not a number"),
    },
    "study": {
        "out where nothing can be written": (["--seeds", "0", "--out", NO_FILES], f"--out {NO_FILES}"),
        "out through a file": (["--seeds", "0", "--out", "{file}/study"], "is a file, not a folder"),
        "out a file": (["--seeds", "0", "--out", "{file}"], "is a file, not a folder"),
        "out a run, not a study": (["--seeds", "0", "--out", "{run}"], "holds no study"),
        "summarise a missing study": (["--seeds", "0", "--out", "{missing}", "--summarise"],
                                      "--summarise: --out"),
        "summarise a file": (["--seeds", "0", "--out", "{file}", "--summarise"], "is a file"),
        "continue a corrupt study": (["--seeds", "0", "--out", "{corrupt_study}"], "study.json is corrupt"),
    },
    "plot": {
        "out where nothing can be written": (["{run}", "--out", f"{NO_FILES}.png"], f"--out {NO_FILES}.png"),
        "out in a missing folder": (["{run}", "--out", "{missing}/curves.png"], "does not exist"),
        "out through a file": (["{run}", "--out", "{file}/curves.png"], "is a file, not a folder"),
        "out a folder": (["{run}", "--out", "{run}"], "is a folder"),
        "out of an unknown format": (["{run}", "--out", "{missing}.jpg"], "choose one of .png, .pdf, .svg"),
        "a missing run": (["{missing}", "--out", "{missing}.png"], "does not exist"),
        "a file for a run": (["{file}", "--out", "{missing}.png"], "is not a folder"),
        "a corrupt run": (["{corrupt_run}", "--out", "{missing}.png"], "config.json is corrupt"),
        "a corrupt study": (["{corrupt_study}", "--out", "{missing}.png"], "study.json is corrupt"),
        "a teaching-size run": (["{teaching_run}", "--out", "{missing}.png"], "is a run of the teaching size's"),
    },
    "verify": {
        "no scratch folder": (["{run}"], "scratch folder"),
        "a missing run": (["{missing}"], "does not exist"),
        "a file for a run": (["{file}"], "is not a folder"),
        "a corrupt run": (["{corrupt_run}"], "config.json is corrupt"),
        "a hand-edited run": (["{edited_run}"], "config.json: its lr is 'fast', which is not a number"),
        "a study for a run": (["{corrupt_study}"], "holds no run"),
        "a teaching-size run": (["{teaching_run}"], "is a run of the teaching size's"),
    },
    "compare": {
        "plot where nothing can be written": (["{run}", "{run}", "--plot", f"{NO_FILES}.png"],
                                              f"--plot {NO_FILES}.png"),
        "plot in a missing folder": (["{run}", "{run}", "--plot", "{missing}/curves.png"], "does not exist"),
        "plot through a file": (["{run}", "{run}", "--plot", "{file}/curves.png"], "is a file, not a folder"),
        "a missing run": (["{run}", "{missing}"], "does not exist"),
        "a file for a run": (["{file}", "{run}"], "is not a folder"),
        "a corrupt run": (["{run}", "{corrupt_run}"], "config.json is corrupt"),
        "a hand-edited run": (["{run}", "{edited_run}"], "config.json: its lr is 'fast', which is not a number"),
        "a teaching-size run": (["{teaching_run}", "{run}"], "is a run of the teaching size's"),
    },
    "evaluate": {
        "json where nothing can be written": (["{run}", "--json", f"{NO_FILES}.json"], f"--json {NO_FILES}.json"),
        "json in a missing folder": (["{run}", "--json", "{missing}/figures.json"], "does not exist"),
        "json through a file": (["{run}", "--json", "{file}/figures.json"], "is a file, not a folder"),
        "json a folder": (["{run}", "--json", "{run}"], "is a folder"),
        "a missing run": (["{missing}"], "does not exist"),
        "a file for a run": (["{file}"], "is not a folder"),
        "a corrupt run": (["{corrupt_run}"], "config.json is corrupt"),
        "a teaching-size run": (["{teaching_run}"], "is a run of the teaching size's"),
        "a run without its model.pt": (["{run}"], "model.pt does not exist (the run finished, but the file is gone)"),
        "missing weights": (["{run}", "--weights", "{missing}"], "--weights"),
    },
    "doctor": {
        "no scratch folder": ([], "scratch folder"),
    },
}


def refusal(command: str, args: list[str], places: dict[str, Path], capsys) -> tuple[int, str, str]:
    """Runs the command's main(); its exit status, stdout and stderr."""
    argv = [arg.format(**{name: str(path) for name, path in places.items()}) for arg in args]
    try:
        code = COMMANDS[command].main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def files_in(folder: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("command, case", [(command, case) for command, cases in CASES.items() for case in cases],
                         ids=[f"{command}: {case}" for command, cases in CASES.items() for case in cases])
def test_each_command_refuses_each_bad_place_with_one_line_and_exit_2(command, case, tmp_path, capsys, monkeypatch):
    if "scratch" in case:  # every temporary folder made from here on would go where nothing can be written
        monkeypatch.setattr(tempfile, "tempdir", NO_FILES)
    places = make_places(tmp_path)
    before = files_in(tmp_path)
    args, piece = CASES[command][case]
    code, out, err = refusal(command, args, places, capsys)
    lines = err.strip().splitlines()
    assert code == 2, f"exit status {code}; stderr:\n{err}"
    assert len(lines) == 1 and lines[0].startswith(f"python -m {PACKAGE}.{command}: error: "), err
    assert piece in lines[0] and "Traceback" not in err
    assert out == ""  # refused before it does or reports anything
    assert files_in(tmp_path) == before  # and before it writes anything


def test_every_command_is_in_the_matrix_with_each_kind_of_bad_place():
    assert set(CASES) == {"train", "study", "plot", "verify", "compare", "evaluate", "doctor"}
    for command in ("train", "study", "plot", "compare", "evaluate"):  # each writes to a place of the user's choosing
        assert any(case.startswith(("out", "plot ", "json ")) and "nothing can be written" in case
                   for case in CASES[command])
    for command in ("train", "study", "plot", "verify", "compare", "evaluate"):  # each reads a run or a study
        assert any("missing" in case for case in CASES[command])
        assert any(("file" in case and "out" not in case) or "corrupt" in case for case in CASES[command])


def test_resuming_into_a_file_says_it_is_a_file_not_that_a_config_in_it_is_corrupt(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("README.md").write_text("# notes\n")
    code, _, err = refusal("train", ["--out", "README.md", "--resume"], {}, capsys)
    assert code == 2
    assert err.strip() == f"python -m {PACKAGE}.train: error: --resume: --out README.md is a file, not a run folder"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, which holds no files, is Linux's")
@pytest.mark.parametrize("command, args", [("train", ["--out", "/proc/run"]),
                                           ("study", ["--seeds", "0", "--out", "/proc/run"]),
                                           ("plot", ["{run}", "--out", "/proc/run.png"])],
                         ids=["train", "study", "plot"])
def test_a_place_under_proc_is_named_for_what_it_is_not_as_a_missing_folder(command, args, tmp_path, capsys):
    code, _, err = refusal(command, args, make_places(tmp_path), capsys)
    assert code == 2
    assert "/proc/run" in err and "cannot write there (a file system that holds no files)" in err
    assert "No such file or directory" not in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_on_a_system_that_is_not_posix_the_commands_that_train_refuse_in_one_line(command, capsys, monkeypatch):
    """Windows, faked: os.name is what startup.platform_problem reads. train, study, verify, evaluate and doctor
    refuse before they run (naming what is POSIX-only); compare and plot only read folders, and run."""
    import os

    from {{ cookiecutter.project_slug }}.engine.cli import POSIX_ONLY_COMMANDS, run_command

    ran = []
    monkeypatch.setattr(os, "name", "nt")
    if command in POSIX_ONLY_COMMANDS:
        with pytest.raises(SystemExit) as stopped:
            run_command(command, lambda: ran.append(command) or 0)
        assert stopped.value.code == 2 and ran == []
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"python -m {PACKAGE}.{command}: error: training needs Linux")
        assert "flock" in lines[0] and "WSL" in lines[0]
    else:
        assert run_command(command, lambda: ran.append(command) or 0) == 0 and ran == [command]


def test_a_reader_that_stops_early_ends_a_command_quietly_without_a_traceback(runs, tmp_path):
    """`compare a b | head -1`: once the reader has gone, the command's next write fails (EPIPE).
    That is the reader's choice, not an error: exit 141 (128 + SIGPIPE, as `ls | head` gives),
    nothing on stderr. Here the reader is gone before the command writes at all."""
    import os
    import subprocess

    from conftest import python_env

    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run([sys.executable, "-m", f"{PACKAGE}.compare", str(runs["seed7"].path),
                               str(runs["seed8"].path)], stdout=writer, stderr=subprocess.PIPE, text=True,
                              env=python_env(), timeout=600)
    finally:
        os.close(writer)
    assert done.returncode == 141 and done.stderr == "", done.stderr[-2000:]
