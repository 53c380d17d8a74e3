"""`doctor --fingerprint FILE [--against THEIRS]`: this machine's digests of every operation a run
depends on (engine/fingerprint.py), natively and under --cpu-kernels portable, each computed in a
fresh interpreter; the comparison names the first operation where two machines part. Its negative
control is the real mechanism: on a CPU with AVX-512, the portable pins change some kernels' and
some of NumPy's functions' bits."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys

import pytest

from {{ cookiecutter.project_slug }}.doctor import main as doctor_main
from {{ cookiecutter.project_slug }}.engine.fingerprint import OPERATIONS, compare_fingerprints, read_fingerprint
from {{ cookiecutter.project_slug }}.engine.startup import cpu_info, portable_problem
from {{ cookiecutter.project_slug }}.verify import main as verify_main

from conftest import FAST, PACKAGE, python_env, train_many


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"{PACKAGE}.doctor", *args], capture_output=True, text=True,
                          env=python_env(), timeout=600)


def with_changed(record: dict, mode: str, *names: str) -> dict:
    other = copy.deepcopy(record)
    for name in names:
        other["modes"][mode]["operations"][name] = "0" * 16
    return other


@pytest.fixture(scope="module")
def fingerprinted(tmp_path_factory):
    """"Theirs": one native fingerprint from a fresh interpreter, its LSTM digest changed, no portable
    record. Then `doctor --fingerprint mine.json --against theirs.json`: (mine's path, what it said)."""
    folder = tmp_path_factory.mktemp("fingerprint")
    native = subprocess.run([sys.executable, "-m", f"{PACKAGE}.operations"], capture_output=True, text=True,
                            env=python_env(), timeout=600)
    assert native.returncode == 0, native.stderr
    theirs = {"format": 1, "cpu": "their CPU", "modes": {"native": json.loads(native.stdout), "portable": None}}
    (folder / "theirs.json").write_text(json.dumps(with_changed(theirs, "native", "torch/lstm")))
    ended = doctor("--fingerprint", str(folder / "mine.json"), "--against", str(folder / "theirs.json"))
    return folder / "mine.json", ended


def test_the_fingerprint_holds_every_operation_in_the_order_a_run_meets_them_in_each_mode(fingerprinted):
    record = read_fingerprint(fingerprinted[0])
    modes = {mode: found for mode, found in record["modes"].items() if found is not None}
    assert "native" in modes and ("portable" in modes) == (portable_problem() is None)
    for found in modes.values():
        assert tuple(found["operations"]) == OPERATIONS, "name each operation you add in OPERATIONS, in its place"
        assert all(len(digest) == 16 for digest in found["operations"].values())


def test_doctor_against_another_machines_fingerprint_names_the_one_operation_that_differs_and_exits_1(fingerprinted):
    """Every other operation gave the same bits in doctor's fresh interpreter as in theirs."""
    path, ended = fingerprinted
    assert ended.returncode == 1, ended.stderr
    said = ended.stdout.splitlines()
    assert said[0].startswith("fingerprint of ") and said[0].endswith(f"-> {path}")
    assert f"  native: differs first at torch/lstm; 1 of {len(OPERATIONS)} differ: torch/lstm" in said
    assert "  portable: not compared (theirs has no portable record)" in said


def test_comparing_names_the_first_operation_that_differs_in_a_runs_order(fingerprinted):
    record = read_fingerprint(fingerprinted[0])
    assert compare_fingerprints(record, copy.deepcopy(record))[1] is True
    lines, same = compare_fingerprints(record, with_changed(record, "native", "task/first_step", "torch/conv2d"))
    assert same is False
    assert lines[0] == (f"native: differs first at torch/conv2d; 2 of {len(OPERATIONS)} differ: "
                        "torch/conv2d, task/first_step")
    lines, _ = compare_fingerprints(record, with_changed(record, "native", "data/val"))
    assert lines[0].startswith("native: differs first at data/val (the data differs")


@pytest.mark.skipif("avx512f" not in (cpu_info()["flags"] or ()) or portable_problem() is not None,
                    reason="needs an x86 CPU with AVX-512, where the portable pins change kernels")
def test_on_an_avx512_cpu_the_portable_pins_change_torchs_kernels_and_numpys_functions(fingerprinted):
    """The fingerprint sees a real difference of kernels, not one a test wrote into a file: the pins
    turn off ATen's AVX-512 kernels and NumPy's AVX-512 loops (its exp and log round otherwise)."""
    record = read_fingerprint(fingerprinted[0])
    native, portable = (record["modes"][mode]["operations"] for mode in ("native", "portable"))
    assert [name for name in OPERATIONS if name.startswith("torch/") and native[name] != portable[name]]
    assert [name for name in OPERATIONS if name.startswith("numpy/") and native[name] != portable[name]]


@pytest.mark.skipif(portable_problem() is not None, reason=f"this CPU cannot run the pins: {portable_problem()}")
def test_a_portable_run_records_its_fingerprint_and_verify_where_the_machine_differs_names_the_operation(
        tmp_path, capsys, runs):
    run = train_many(tmp_path, {"portable": (("--epochs", "1", "--cpu-kernels", "portable"), {})})["portable"]
    record = read_fingerprint(run.path / "fingerprint.json")
    assert record["modes"]["native"] is None and tuple(record["modes"]["portable"]["operations"]) == OPERATIONS
    assert not (runs["seed7_threads2"].path / "fingerprint.json").exists()  # a native run spends nothing on it
    # Another machine, as verify sees it: another CPU model, whose LSTM kernel gave other bits.
    elsewhere = shutil.copytree(run.path, tmp_path / "elsewhere")
    environment = json.loads((elsewhere / "environment.json").read_text())
    (elsewhere / "environment.json").write_text(json.dumps({**environment, "cpu_model": "Another CPU"}))
    (elsewhere / "fingerprint.json").write_text(json.dumps(with_changed(record, "portable", "torch/lstm")))
    assert verify_main([str(elsewhere), "--steps", "2"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[said.index("this machine differs from the one that made the run:") + 1].startswith("  cpu_model: ")
    assert f"  portable: differs first at torch/lstm; 1 of {len(OPERATIONS)} differ: torch/lstm" in said
    # The negative control: on the machine that made it nothing differs, and nothing is computed.
    assert verify_main([str(run.path), "--steps", "2"]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if "fixed inputs" in line]


def test_the_first_step_digest_is_of_the_weights_after_the_runs_own_first_step(tmp_path):
    """task/first_step digests the step a run of these settings takes first, with its seed, order
    and batch: the oracle is the run itself, whose first checkpoint holds the weights after that
    step; another seed's digest differs (the control)."""
    from dataclasses import replace

    import torch

    from {{ cookiecutter.project_slug }}.config import Config
    from {{ cookiecutter.project_slug }}.operations import first_step_fingerprint
    from {{ cookiecutter.project_slug }}.train import main
    from {{ cookiecutter.project_slug }}.utils.repro import state_dict_sha256

    assert main(["--out", str(tmp_path / "run"), *FAST, "--stop-after-steps", "1"]) == 0
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "step-00000001.pt", weights_only=True)
    config = Config.from_dict(json.loads((tmp_path / "run" / "config.json").read_text()))[0]
    digest = first_step_fingerprint(config)
    assert digest == {"task/first_step": state_dict_sha256(checkpoint["model"])[:16]}
    assert first_step_fingerprint(replace(config, seed=(config.seed + 1) % 2**32)) != digest


@pytest.mark.parametrize("record", [[], {"modes": {}}, {"format": 2, "modes": {}}, {"format": 1, "modes": []}],
                         ids=["not an object", "no format", "another format", "modes not an object"])
def test_a_file_of_another_format_is_refused_not_misread(record, tmp_path):
    (tmp_path / "theirs.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="is not a fingerprint of this format"):
        read_fingerprint(tmp_path / "theirs.json")
    (tmp_path / "theirs.json").write_text(json.dumps({"format": 1, "modes": {}}))
    assert read_fingerprint(tmp_path / "theirs.json") == {"format": 1, "modes": {}}  # this format is read


@pytest.mark.parametrize("args, says", [
    (["--against", "x.json"], "--against needs --fingerprint FILE"),
    (["--fingerprint", "{tmp}/out.json", "--against", "{tmp}/missing.json"], "--against: cannot read"),
    (["--fingerprint", "{tmp}/out.json", "--against", "{tmp}/not-one.json"], "is not a fingerprint"),
    (["--fingerprint", "{tmp}/no/such/folder/out.json"], "cannot write a file there"),
    (["--fingerprint", "{tmp}/out.json", "{tmp}"], "takes no run folder"),
])
def test_a_bad_fingerprint_command_gets_one_line_exit_2_and_writes_nothing(args, says, tmp_path, capsys):
    (tmp_path / "not-one.json").write_text('{"weights_sha256": "abc"}')
    with pytest.raises(SystemExit) as ended:  # refused before anything is computed, so in this process
        doctor_main([arg.format(tmp=tmp_path) for arg in args])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and says in err, err
    assert not (tmp_path / "out.json").exists()
