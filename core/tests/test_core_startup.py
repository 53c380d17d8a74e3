"""engine/startup.py, before torch loads: the variables the relaunch sets for the training process
(the hash seed over the seed's whole range, every kernel pin under portable), the kernel variables
as the process started with them, and the training process recognised whatever Python's options."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from repro_core.engine import startup


@pytest.mark.parametrize("seed", ["0", "4294967295"])
def test_every_seed_train_accepts_sets_the_hash_seed_the_largest_too(seed: str) -> None:
    assert startup.run_environment(["--seed", seed], 42)["PYTHONHASHSEED"] == seed


def test_a_seed_train_refuses_sets_no_hash_seed_for_train_to_refuse_in_its_own_words() -> None:
    assert "PYTHONHASHSEED" not in startup.run_environment(["--seed", "4294967296"], 42)
    assert "PYTHONHASHSEED" not in startup.run_environment(["--seed", "-1"], 42)


def test_a_resumed_run_takes_the_seed_its_config_json_recorded(tmp_path) -> None:
    """Its hash seed is the run's own, not the default's: the oracle, the seed written here."""
    (tmp_path / "config.json").write_text('{"seed": 7}', encoding="utf-8")
    assert startup.seed_from_command_line(["--resume", "--out", str(tmp_path)], 42) == "7"
    assert startup.seed_from_command_line(["--resume", "--out", str(tmp_path), "--seed", "8"], 42) == "8"  # typed


@pytest.mark.parametrize("recorded", [None, "[3]", "null", '"seed 7"', "7", "{}", "{not json", b"\xff\xfe"],
                         ids=["no file", "a list", "null", "a string", "a number", "no seed", "not JSON", "not UTF-8"])
def test_a_run_folder_the_relaunch_cannot_read_leaves_the_default_for_train_to_refuse_in_its_own_words(
        recorded: str | bytes | None, tmp_path) -> None:
    """A missing, clobbered or hand-edited config.json: no traceback before train starts, whose
    parser says in one line what is wrong with the run folder."""
    if isinstance(recorded, bytes):
        (tmp_path / "config.json").write_bytes(recorded)
    elif recorded is not None:
        (tmp_path / "config.json").write_text(recorded, encoding="utf-8")
    assert startup.seed_from_command_line(["--resume", "--out", str(tmp_path)], 42) == "42"


@pytest.mark.parametrize("seed_from", ["--seed", "--config"])
def test_a_resume_without_out_reads_the_folder_of_the_seed_typed_or_in_the_file(seed_from: str, tmp_path,
                                                                                 monkeypatch) -> None:
    """train's default folder is runs/seed<SEED> of the seed typed or in --config's file: the relaunch
    reads a resumed run's settings there, not in the default seed's folder (before, the pins of a
    portable run resumed with `--resume --seed 3` were read from runs/seed42, and train refused to
    go on, saying it had not been started as train). The control: the default seed's own folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(startup, "portable_problem", lambda cpu=None: None)
    for seed, kernels in ((3, "portable"), (42, "native")):
        (tmp_path / "runs" / f"seed{seed}").mkdir(parents=True)
        (tmp_path / "runs" / f"seed{seed}" / "config.json").write_text(
            f'{{"seed": {seed}, "cpu_kernels": "{kernels}"}}', encoding="utf-8")
    (tmp_path / "settings.toml").write_text("seed = 3\n", encoding="utf-8")
    argv = ["--resume", *(["--seed", "3"] if seed_from == "--seed" else ["--config", "settings.toml"])]
    assert startup.run_environment(argv, 42) == {"PYTHONHASHSEED": "3", **startup.PORTABLE_CPU_KERNELS}
    assert startup.run_environment(["--resume"], 42) == {"PYTHONHASHSEED": "42"}


@pytest.mark.parametrize("seed", ["\u00b2", "\u0664\u0662", "\uff14\uff12"],
                         ids=["superscript two", "Arabic-Indic", "fullwidth"])
def test_a_seed_of_digits_python_reads_as_no_integer_adds_no_hash_seed_and_raises_nothing(seed: str) -> None:
    """"²".isdigit() is True, and int("²") raises: such a seed is train's to refuse in one line."""
    assert "PYTHONHASHSEED" not in startup.run_environment(["--seed", seed], 42)


# A fresh interpreter under -W error with NumPy's portable pin: NumPy warns as it loads of the names
# it does not dispatch; argv[1] says whether the warning is quietened first.
LOADS_NUMPY = """
import sys
from repro_core.engine.startup import quieten_numpys_pin_warning
if sys.argv[1] == "quietened":
    quieten_numpys_pin_warning()
import numpy
print("numpy loaded")
"""


@pytest.mark.skipif(startup.portable_problem() is not None, reason=f"the pins do not fit this CPU: "
                    f"{startup.portable_problem()}")
def test_under_the_portable_pin_numpy_loads_even_under_w_error_once_its_warning_is_quietened() -> None:
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": startup.PORTABLE_CPU_KERNELS["NPY_DISABLE_CPU_FEATURES"]}
    loud, quiet = (subprocess.run([sys.executable, "-W", "error", "-c", LOADS_NUMPY, mode], capture_output=True,
                                  text=True, env=env) for mode in ("loud", "quietened"))
    if loud.returncode == 0:
        pytest.skip("this NumPy dispatches every name of the pin here: it has no warning to quieten")
    assert "ImportWarning" in loud.stderr  # the control: the warning is there, and -W error makes it fatal
    assert quiet.returncode == 0 and quiet.stdout == "numpy loaded\n", quiet.stderr


@pytest.mark.skipif(startup.portable_problem() is not None, reason=f"the pins do not fit this CPU: "
                    f"{startup.portable_problem()}")
def test_portable_sets_every_pin_numpys_included() -> None:
    """NumPy's exp and log take AVX-512 paths of their own: a task's augmentation computes with them."""
    assert startup.run_environment(["--cpu-kernels", "portable"], 42) == \
        {"PYTHONHASHSEED": "42", **startup.PORTABLE_CPU_KERNELS}
    assert startup.run_environment([], 42) == {"PYTHONHASHSEED": "42"}  # native: no pin


@pytest.mark.parametrize("source", ["--config toml", "--config json", "--resume"])
def test_portable_kernels_from_a_settings_file_or_a_resumed_run_are_pinned_as_when_typed(
        source: str, tmp_path, monkeypatch) -> None:
    """The pins follow the setting wherever train reads it from: a settings file written with the
    dashed name (as typed) or the underscored one, or the config.json of the run --resume continues;
    otherwise a run recorded as portable would start on native kernels. The CPU's own fitness is
    taken as given here (portable_problem is the test above's); the control: native, from the same
    places, pins nothing."""
    monkeypatch.setattr(startup, "portable_problem", lambda cpu=None: None)

    def argv(kernels: str) -> list[str]:
        if source == "--config toml":
            (tmp_path / "settings.toml").write_text(f'cpu-kernels = "{kernels}"\n', encoding="utf-8")
            return ["--config", str(tmp_path / "settings.toml")]
        if source == "--config json":
            (tmp_path / "settings.json").write_text(f'{{"cpu_kernels": "{kernels}"}}', encoding="utf-8")
            return ["--config", str(tmp_path / "settings.json")]
        (tmp_path / "config.json").write_text(f'{{"seed": 42, "cpu_kernels": "{kernels}"}}', encoding="utf-8")
        return ["--resume", "--out", str(tmp_path)]

    assert startup.run_environment(argv("portable"), 42) == {"PYTHONHASHSEED": "42", **startup.PORTABLE_CPU_KERNELS}
    assert startup.run_environment(argv("native"), 42) == {"PYTHONHASHSEED": "42"}


@pytest.mark.skipif(startup.initial_environment() is None, reason="this system does not say what a process "
                    "started with (no /proc)")
def test_the_kernel_variables_are_those_the_process_started_with_not_a_later_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The libraries read them as they load: one set in os.environ since is in effect nowhere."""
    started_with = startup.initial_environment().get("ATEN_CPU_CAPABILITY")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "set-after-the-start")
    assert startup.cpu_kernel_variables()["ATEN_CPU_CAPABILITY"] == started_with


@pytest.mark.parametrize(("argv", "started"), [
    (["python", "-m", "pkg.train", "--seed", "3"], True),
    (["python", "-mpkg.train"], True),
    (["python", "-X", "importtime", "-m", "pkg.train"], True),
    (["python", "-W", "error", "-u", "-m", "pkg.train"], True),
    (["python", "-m", "pkg.verify"], False),
    (["python", "script.py", "-m", "pkg.train"], False),
    (["python", "-c", "import pkg.train", "-m", "pkg.train"], False),
], ids=["plain", "joined", "-X and its value", "-W and its value", "another module", "a script", "-c"])
def test_the_training_process_is_recognised_whatever_pythons_options(argv: list[str], started: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "orig_argv", argv)
    assert startup.started_as_module("pkg.train") is started
