"""Specifications of a run on another machine: the CPU kernel paths pinned by --cpu-kernels
portable, what environment.json records of the machine and its software, verify's and compare's
explanation of what differs, doctor RUN and the requirements file it writes.

The cross-capability runs (13 fresh training processes) are in the slow tier (`pytest -m slow`);
the plain tier checks the mechanism itself: the relaunch pins the variables, a process that did
not start pinned is refused, and each run records what decides its CPU bits.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from subprocess import CalledProcessError, CompletedProcess, TimeoutExpired
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from {{ cookiecutter.project_slug }} import compare, doctor, verify
from {{ cookiecutter.project_slug }}.config import Config
from {{ cookiecutter.project_slug }}.engine import environment
from {{ cookiecutter.project_slug }}.engine.runs import read_run
from {{ cookiecutter.project_slug }}.engine.startup import (
    cpu_info,
    cpu_kernel_variables,
    initial_environment,
    linux_cpu,
    portable_problem,
    run_environment,
)
from {{ cookiecutter.project_slug }}.train import main
from {{ cookiecutter.project_slug }}.utils.device import available_devices
from {{ cookiecutter.project_slug }}.utils.repro import determinism_flags, hash_seed_in_effect

from conftest import FAST, PACKAGE, python_env, train_many

OTHER_MACHINE = "riscv64" if platform.machine() == "aarch64" else "aarch64"  # an architecture this is not

# The pins the portable mode sets, written out here rather than read from the code's own table, so
# that a wrong value in the code fails (each value found by experiment on an AVX-512 machine).
NUMPY_AVX512 = "X86_V4 AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "MKL_CBWR": "AVX2", "NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512}
# A shell whose variables send every library down another path than the pins.
OTHER_SHELL = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE",
               "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "NPY_DISABLE_CPU_FEATURES": "X86_V3 AVX2"}
NO_PORTABLE = portable_problem()
needs_portable = pytest.mark.skipif(NO_PORTABLE is not None, reason=f"this CPU cannot run the pins: {NO_PORTABLE}")

# No torch here, to keep it cheap: that torch obeys the variables is what the slow test shows.
PRINT_KERNELS = f"""
import json, sys
from {PACKAGE}.engine.startup import relaunch_with_run_environment, cpu_kernel_variables
relaunch_with_run_environment(sys.argv[1:], default_seed=0)
print(json.dumps(cpu_kernel_variables()))
"""


def kernels_in_a_fresh_process(*argv: str) -> subprocess.Popen:
    """A fresh interpreter from OTHER_SHELL that relaunches as train would for `argv`, then says
    which kernel variables it started with (the ones torch would read)."""
    return subprocess.Popen([sys.executable, "-c", PRINT_KERNELS, *argv], stdout=subprocess.PIPE, text=True,
                            env=python_env(**OTHER_SHELL))


@needs_portable
def test_the_relaunch_pins_the_cpu_kernels_under_portable_and_leaves_the_shells_under_native():
    portable, native = kernels_in_a_fresh_process("--cpu-kernels", "portable"), kernels_in_a_fresh_process()
    (portable_out, _), (native_out, _) = portable.communicate(timeout=300), native.communicate(timeout=300)
    assert json.loads(portable_out) == PINS
    assert json.loads(native_out) == OTHER_SHELL  # the negative control: without the pin, the shell's


# NumPy's SIMD targets that are on in this process, after the relaunch train would make.
PRINT_NUMPY_TARGETS = f"""
import json, sys
from {PACKAGE}.engine.startup import relaunch_with_run_environment
relaunch_with_run_environment(sys.argv[1:], default_seed=0)
import numpy
try:
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
except ImportError:  # NumPy 1.x
    from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
print(json.dumps([name for name in __cpu_dispatch__ if __cpu_features__.get(name)]))
"""


def numpys_targets(*argv: str) -> list[str]:
    """`python -W error`: NumPy's warning of the names in the pin that its version does not know
    would stop the import, unless the relaunch quietens it."""
    ended = subprocess.run([sys.executable, "-W", "error", "-c", PRINT_NUMPY_TARGETS, *argv], capture_output=True,
                           text=True, env=python_env(), timeout=300)
    assert ended.returncode == 0, ended.stderr[-2000:]
    return json.loads(ended.stdout)


@needs_portable
def test_under_portable_numpy_loads_without_its_avx512_loops_even_under_w_error():
    beyond_avx2 = [name for name in numpys_targets("--cpu-kernels", "portable") if "512" in name or name == "X86_V4"]
    assert beyond_avx2 == []
    if "avx512f" in (cpu_info()["flags"] or ()):  # the negative control, where there is AVX-512 to turn off
        assert [name for name in numpys_targets() if "512" in name or name == "X86_V4"]


@pytest.mark.skipif(initial_environment() is None, reason="reads the starting environment from /proc (Linux)")
def test_a_kernel_variable_set_after_the_start_is_not_recorded_as_in_effect(monkeypatch):
    """The libraries read their variables as they load: a change to os.environ later reaches none of
    them, so environment.json keeps what the process started with."""
    started = initial_environment().get("MKL_CBWR")
    monkeypatch.setenv("MKL_CBWR", "AVX" if started != "AVX" else "COMPATIBLE")
    assert cpu_kernel_variables()["MKL_CBWR"] == started


def test_a_resumed_run_relaunches_with_its_recorded_cpu_kernels(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"seed": 7, "cpu_kernels": "portable"}))
    wanted = run_environment(["--out", str(tmp_path), "--resume"], default_seed=42)
    assert wanted["PYTHONHASHSEED"] == "7"
    assert (wanted.items() >= PINS.items()) == (NO_PORTABLE is None)
    assert not run_environment(["--cpu-kernels", "native"], 42).keys() & set(PINS)


def test_portable_in_a_process_that_did_not_start_pinned_is_refused(tmp_path, capsys):
    """train called from a script (not relaunched): the libraries have read their variables already,
    so the run would record "portable" and compute natively. One line, exit 2, nothing written."""
    with pytest.raises(SystemExit) as exit_info:
        main([*FAST, "--cpu-kernels", "portable", "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--cpu-kernels portable" in err
    assert not (tmp_path / "run").exists()


def test_the_portable_pins_refuse_a_cpu_they_do_not_fit():
    arm = linux_cpu("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes sve\nCPU part\t: 0xd40\n")
    assert arm == (None, {"fp", "asimd", "evtstrm", "aes", "sve"})
    assert "no such pin" in portable_problem({"machine": "aarch64", "model": None, "flags": arm[1]})
    old_x86 = linux_cpu("processor\t: 0\nmodel name\t: Old CPU\nflags\t\t: fpu sse4_2 avx\n\nprocessor\t: 1\n")
    assert old_x86 == ("Old CPU", {"fpu", "sse4_2", "avx"})
    assert "lacks avx2, fma" in portable_problem({"machine": "x86_64", "model": "Old CPU", "flags": old_x86[1]})
    assert portable_problem({"machine": "x86_64", "model": "New", "flags": {"avx2", "fma"}}) is None


def test_environment_json_records_what_decides_the_cpus_bits_and_the_whole_stack(runs):
    recorded = runs["seed7"].environment
    assert recorded["cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # this shell's, natively
    assert set(recorded["cpu_kernel_variables"]) == set(PINS)
    assert recorded["machine"]
    assert {"cpu_model", "cpu_flags", "blas", "gpu_driver", "compute_capability"} <= recorded.keys()
    if "mkl" in torch.__config__.show().lower():
        assert recorded["mkl"] and recorded["onednn"]
    assert recorded["packages"]["torch"] == torch.__version__
    assert recorded["packages"]["numpy"] == recorded["numpy"]
    assert set(environment.ENVIRONMENT_KEYS) <= recorded.keys()


def edited_copy(run, folder, **entries):
    """A copy of a run whose environment.json claims other values (as if made on another machine)."""
    copy = shutil.copytree(run.path, folder / "edited")
    recorded = json.loads((copy / "environment.json").read_text())
    (copy / "environment.json").write_text(json.dumps({**recorded, **entries}))
    return read_run(copy)


def test_verify_explains_each_recorded_entry_that_differs_from_this_machine(runs, tmp_path):
    run = runs["seed7_threads2"]
    assert verify.machine_check(run) == (None, [])  # the same machine: nothing to explain
    other = "AVX2" if run.environment["cpu_capability"] != "AVX2" else "AVX512"
    edited = edited_copy(run, tmp_path, cpu_capability=other, onednn="0.1")
    refusal, lines = verify.machine_check(edited)
    assert refusal is None
    here = run.environment["cpu_capability"]
    assert lines == [f"cpu_capability: {other!r} -> {here!r}: changes bits; ATen's vectorised kernels differ by "
                     "instruction set; rerun both with --cpu-kernels portable",
                     f"onednn: '0.1' -> {run.environment['onednn']!r}: changes bits; install the recorded torch "
                     "build (oneDNN comes with it)"]


@pytest.mark.parametrize("entries, needs", [
    (dict(machine=OTHER_MACHINE), f"verify it on {OTHER_MACHINE}"),
    (dict(device="cuda:0", device_name="NVIDIA H100"), "needs that kind of device"),
])
def test_verify_refuses_a_run_from_an_incompatible_machine_with_one_line(runs, tmp_path, capsys, entries, needs):
    if "device" in entries and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: it can verify a CUDA run")
    edited = edited_copy(runs["seed7_threads2"], tmp_path, **entries)
    before = {path: path.read_bytes() for path in edited.path.rglob("*") if path.is_file()}
    with pytest.raises(SystemExit) as exit_info:
        verify.main([str(edited.path)])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and needs in captured.err and not captured.out
    assert {path: path.read_bytes() for path in edited.path.rglob("*") if path.is_file()} == before


def test_doctor_on_a_run_from_an_incompatible_machine_says_so_and_fails(runs, tmp_path, capsys):
    """doctor RUN's negative control: a run recorded on another architecture is a problem, exit 1."""
    edited = edited_copy(runs["seed7"], tmp_path, machine=OTHER_MACHINE)
    assert doctor.main([str(edited.path), "--quick"]) == 1
    out = capsys.readouterr().out
    assert re.search(rf"^problem: .*{OTHER_MACHINE}", out, re.MULTILINE) and "VERDICT: 1 problem(s)" in out


def test_compare_explains_the_environment_differences(runs, tmp_path, capsys):
    edited = edited_copy(runs["seed7"], tmp_path, intra_op_threads=4,
                         cpu_kernel_variables={**runs["seed7"].environment["cpu_kernel_variables"], "MKL_CBWR": "AVX"})
    assert compare.main([str(runs["seed7"].path), str(edited.path)]) == 0  # the records differ, the runs do not
    out = capsys.readouterr().out
    assert "intra_op_threads: 1 -> 4: changes bits; reductions are split by thread" in out
    recorded = runs["seed7"].environment["cpu_kernel_variables"]["MKL_CBWR"]
    assert f"cpu_kernel_variables: MKL_CBWR {recorded!r} -> 'AVX': changes bits;" in out


def test_the_package_differences_are_each_version_changed_and_each_package_one_side_lacks():
    """Both sides read, in the order of names whatever their case: a package installed since the
    run changes a rerun as surely as one upgraded or removed."""
    recorded = {"numpy": "2.1.0", "torch": "2.13.0", "Pillow": "10.0", "only-in-the-run": "1.0"}
    here = {"numpy": "2.2.0", "torch": "2.13.0", "Pillow": "10.0", "Only-here": "3.1"}
    assert environment.package_differences(recorded, here) == [
        "numpy: 2.1.0 -> 2.2.0", "Only-here: (not installed) -> 3.1", "only-in-the-run: 1.0 -> (not installed)"]
    assert environment.package_differences(recorded, dict(recorded)) == []


def test_doctor_run_lists_the_packages_that_differ_and_writes_the_requirements(runs, tmp_path, capsys):
    packages = {**runs["seed7"].environment["packages"], "numpy": "0.0.1", "gone-package": "1.0"}
    edited = edited_copy(runs["seed7"], tmp_path, packages=packages)
    requirements = tmp_path / "requirements-run.txt"
    doctor.main([str(edited.path), "--quick", "--requirements", str(requirements)])
    out = capsys.readouterr().out
    assert f"numpy: 0.0.1 -> {runs['seed7'].environment['numpy']}" in out
    assert "gone-package: 1.0 -> (not installed)" in out
    lines = requirements.read_text().splitlines()
    assert "numpy==0.0.1" in lines and "gone-package==1.0" in lines and f"torch=={torch.__version__}" in lines
    if "+" in torch.__version__:  # a build from the PyTorch index: the file names it
        assert f"--extra-index-url https://download.pytorch.org/whl/{torch.__version__.split('+')[1]}" in lines


def test_the_requirements_name_the_torch_build_and_leave_what_came_from_no_index_as_notes():
    recorded = {"python": "3.12.1", "platform": "Linux", "cuda": "12.4",
                "packages": {"torch": "2.5.1", "pip": "24.0", "my-project": "0.1.0", "tqdm": "4.66.0"},
                "package_sources": {"my-project": "file:///home/me/my-project"}}
    lines = environment.requirements_text(recorded, "runs/a", "doctor").splitlines()
    assert "# torch 2.5.1 is the CUDA 12.4 build, as the package index serves it for this platform" in lines
    assert "torch==2.5.1" in lines and "tqdm==4.66.0" in lines and not any(line.startswith("pip==") for line in lines)
    assert not any(line.startswith("my-project==") for line in lines)
    assert any(line.startswith("# my-project==0.1.0 came from file:///home/me/my-project") for line in lines)
    assert environment.torch_build("2.5.1+cu124", "12.4")[1] == "--extra-index-url https://download.pytorch.org/whl/cu124"


def test_doctor_says_when_a_cuda_build_of_torch_has_no_gpu_to_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    note = doctor.cuda_build_note()
    assert "CUDA 12.8 build" in note and "no usable GPU" in note and "whl/cpu" in note
    monkeypatch.setattr(torch.version, "cuda", None)  # the CPU build: nothing to say
    assert doctor.cuda_build_note() is None


def test_the_gpu_driver_is_read_from_nvidia_smi_and_is_none_without_it(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"  # prints what the real one prints for --query-gpu=driver_version
    fake.write_text("#!/bin/sh\necho 550.54.15\necho 550.54.15\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert environment.gpu_driver() == "550.54.15"
    fake.unlink()
    assert environment.gpu_driver() is None


def test_doctor_refuses_requirements_without_a_run_folder(capsys):
    with pytest.raises(SystemExit) as exit_info:
        doctor.main(["--quick", "--requirements", "requirements-run.txt"])
    assert exit_info.value.code == 2 and "needs a run folder" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["under a file", "in a folder that does not exist"])
def test_doctor_refuses_a_requirements_file_it_cannot_write_before_any_trial_and_makes_no_folder(where, runs, tmp_path,
                                                                                                 capsys):
    """Checked as doctor starts, not after its trial runs: one line and exit 2, and no folder made
    on the way (a typo in the path is the user's to fix, not a folder to create)."""
    parent = tmp_path / "summary.json" if where == "under a file" else tmp_path / "no-such-folder"
    if where == "under a file":
        parent.write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        doctor.main([str(runs["seed7"].path), "--quick", "--requirements", str(parent / "requirements-run.txt")])
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert exit_info.value.code == 2 and "cannot write a file there" in line, captured.err
    assert captured.out == "" and sorted(path.name for path in tmp_path.iterdir()) == (
        ["summary.json"] if where == "under a file" else [])


# The shells of the cross-capability runs: each one variable that sends one library down another
# path on this machine (the negative control), then all of them at once.
SHELLS = {"none": {}, "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"}, "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
          "onednn_avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "mkl_compatible": {"MKL_CBWR": "COMPATIBLE"},
          "mkl_sse4_2": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}, "all_other": OTHER_SHELL}
# An AVX2-only Intel machine, as far as one machine can play it: each library's dispatch capped at AVX2.
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                "NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512}


# ---- environment.py in process: each entry, line and refusal against its source ----------------
# The tests above read environment.json from real runs; these build the record and its comparisons
# in this process, so that every entry and every line is checked, on whatever machine runs them.


def test_the_record_takes_each_entry_from_what_decides_it(monkeypatch):
    """On a CPU: a CUDA build of torch without a usable GPU (stand-ins) records no GPU entries."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr(environment, "git_commit", lambda: "0123abc+dirty")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    monkeypatch.setattr(environment, "gpu_driver", lambda: "550.54.15")
    recorded = environment.describe_environment(torch.device("cpu"), 3, "gloo")
    cpu = cpu_info()
    assert {name: recorded[name] for name in ("world_size", "distributed_backend", "device", "git_commit")} == {
        "world_size": 3, "distributed_backend": "gloo", "device": "cpu", "git_commit": "0123abc+dirty"}
    assert recorded["python"] == platform.python_version() and recorded["platform"] == platform.platform()
    assert (recorded["torch"], recorded["numpy"], recorded["cuda"]) == (torch.__version__, np.__version__,
                                                                        torch.version.cuda)
    assert recorded["device_name"] == (platform.processor() or platform.machine())
    assert recorded["available_devices"] == available_devices()
    assert recorded["intra_op_threads"] == torch.get_num_threads()
    assert recorded["python_hash_seed"] == hash_seed_in_effect()
    assert recorded["determinism"] == determinism_flags()
    assert recorded["environment_variables"] == {name: os.environ.get(name) for name in environment.RECORDED_ENV}
    assert recorded["environment_variables"]["OMP_NUM_THREADS"] == "3"
    assert (recorded["machine"], recorded["cpu_model"]) == (cpu["machine"], cpu["model"])
    assert recorded["cpu_flags"] == (sorted(cpu["flags"] & environment.NOTABLE_CPU_FLAGS)
                                     if cpu["flags"] is not None else None)
    assert recorded["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert recorded["cpu_kernel_variables"] == cpu_kernel_variables()
    assert {name: recorded[name] for name in ("blas", "mkl", "onednn")} == environment.cpu_libraries(
        torch.__config__.show())
    assert {name: recorded[name] for name in ("packages", "package_sources")} == environment.installed_packages()
    assert (recorded["cudnn"], recorded["gpu_driver"], recorded["compute_capability"]) == (None, None, None)
    monkeypatch.setattr(environment, "cpu_info", lambda: {"machine": "x86_64", "model": None, "flags": None})
    assert environment.describe_environment(torch.device("cpu"), 1, None)["cpu_flags"] is None  # no flags said


def test_a_run_on_a_gpu_records_the_gpus_name_generation_driver_and_cudnn(monkeypatch):
    """Stand-ins for torch.cuda and nvidia-smi: this machine need not have a GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"NVIDIA H100 ({device})")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: {"cuda:1": (9, 0)}[str(device)])
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    monkeypatch.setattr(environment, "gpu_driver", lambda: "550.54.15")
    monkeypatch.setattr(environment, "git_commit", lambda: None)
    recorded = environment.describe_environment(torch.device("cuda:1"), 1, None)
    gpu_entries = ("device", "device_name", "cudnn", "gpu_driver", "compute_capability")
    assert {name: recorded[name] for name in gpu_entries} == {
        "device": "cuda:1", "device_name": "NVIDIA H100 (cuda:1)", "cudnn": 91002, "gpu_driver": "550.54.15",
        "compute_capability": "9.0"}
    assert recorded["available_devices"][:3] == ["cpu", "cuda:0", "cuda:1"]


@pytest.mark.parametrize("cpu_kernels", ["native", "portable"])
def test_the_machines_entries_known_before_a_run_are_the_ones_the_run_will_record(cpu_kernels, monkeypatch):
    """What verify compares before it reruns: the config's thread count, and under portable the pins
    the training process will set for itself, not this process's own."""
    monkeypatch.setattr(environment, "git_commit", lambda: None)
    now = environment.machine_environment(Config(threads=3, cpu_kernels=cpu_kernels), torch.device("cpu"))
    assert now["intra_op_threads"] == 3 and now["world_size"] == 1 and now["distributed_backend"] is None
    if cpu_kernels == "portable":
        assert now["cpu_kernel_variables"] == PINS and now["cpu_capability"] == "AVX2"
    else:
        assert now["cpu_kernel_variables"] == cpu_kernel_variables()
        assert now["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


@pytest.mark.parametrize("config_text, libraries", [
    ("  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64\n"
     "  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71)\n  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release",
     {"blas": "mkl", "mkl": "2024.2", "onednn": "3.12.0"}),
    ("  - oneDNN v3.7.1 (Git Hash 8d263e6)\n  - Build settings: BLAS_INFO=open, LAPACK_INFO=open",  # ARM
     {"blas": "open", "mkl": None, "onednn": "3.7.1"}),
    ("PyTorch built with:\n  - GCC 11.2\n", {"blas": None, "mkl": None, "onednn": None}),
])
def test_the_cpu_libraries_are_read_from_torchs_build_description(config_text, libraries):
    assert environment.cpu_libraries(config_text) == libraries


def answering(monkeypatch, *answers):
    """A stand-in for the function that runs a command (`run`, of the subprocess module): it gives
    the answers in turn (an exception is raised) and keeps each command line and its settings."""
    commands, pending = [], list(answers)

    def run(command, **kwargs):
        commands.append((command, kwargs))
        answer = pending.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return CompletedProcess(command, *answer)

    monkeypatch.setattr(environment.subprocess, "run", run)
    return commands


@pytest.mark.parametrize("answer, driver", [
    ((0, "550.54.15\n", ""), "550.54.15"), ((0, "550.54.15\n550.54.15\n", ""), "550.54.15"),  # one GPU, two
    ((9, "", "NVIDIA-SMI has failed\n"), None),
    ((0, "", ""), None), (FileNotFoundError("nvidia-smi"), None), (TimeoutExpired("nvidia-smi", 30), None)])
def test_the_gpu_driver_is_nvidia_smis_first_answer_and_none_when_it_gives_none(answer, driver, monkeypatch):
    commands = answering(monkeypatch, answer)
    assert environment.gpu_driver() == driver
    assert commands == [(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         {"capture_output": True, "text": True, "timeout": 30})]


@pytest.mark.parametrize("answers, commit", [
    ([(0, "0123abc\n", ""), (0, "", "")], "0123abc"),
    ([(0, "0123abc\n", ""), (0, " M src/train.py\n", "")], "0123abc+dirty"),
    ([CalledProcessError(128, "git")], None),  # not a repository
    ([FileNotFoundError("git")], None), ([(0, "0123abc\n", ""), TimeoutExpired("git", 10)], None)])
def test_the_commit_is_the_checkouts_with_dirty_for_uncommitted_changes_and_none_outside_git(answers, commit,
                                                                                               monkeypatch):
    commands = answering(monkeypatch, *answers)
    assert environment.git_commit() == commit
    here = str(Path(environment.__file__).resolve().parent)
    settings = {"capture_output": True, "text": True, "timeout": 10, "check": True}  # check: a non-repository raises
    assert commands == [(["git", "-C", here, "rev-parse", "HEAD"], settings),
                        (["git", "-C", here, "status", "--porcelain"], settings)][:len(answers)]


def test_the_packages_are_each_distribution_python_imports_and_where_those_from_no_index_came_from(monkeypatch):
    def distribution(name, version, direct_url=None):
        direct = json.dumps(direct_url) if direct_url is not None else None
        return SimpleNamespace(metadata={"Name": name}, version=version,
                               read_text=lambda file: direct if file == "direct_url.json" else None)

    editable = {"url": "file:///home/me/my-project", "dir_info": {"editable": True}}
    found = [distribution("torch", "2.13.0"), distribution("my-project", "0.1.0", editable),
             distribution("Pillow", "10.0"), distribution("torch", "2.0.0"),  # further down sys.path: shadowed
             distribution(None, "0"), distribution("numpy", "2.2.0"),  # a broken install: no name
             distribution("odd", "1.0", {}),  # a direct_url.json without its url
             distribution("torchaudio", "2.13.0"), distribution("torch_geometric", "2.6.1")]
    monkeypatch.setattr(environment.importlib.metadata, "distributions", lambda: iter(found))
    assert environment.installed_packages() == {
        "packages": {"my-project": "0.1.0", "numpy": "2.2.0", "odd": "1.0", "Pillow": "10.0", "torch": "2.13.0",
                     "torch_geometric": "2.6.1", "torchaudio": "2.13.0"},
        "package_sources": {"my-project": "file:///home/me/my-project", "odd": "?"}}
    assert list(environment.installed_packages()["packages"]) == [  # by lower-case name ("_" before letters)
        "my-project", "numpy", "odd", "Pillow", "torch", "torch_geometric", "torchaudio"]


@pytest.mark.parametrize("version, cuda, lines", [
    ("2.13.0+cpu", None, ["# torch 2.13.0+cpu is the CPU build, from the PyTorch index:",
                          "--extra-index-url https://download.pytorch.org/whl/cpu"]),
    ("2.5.1+cu124", "12.4", ["# torch 2.5.1+cu124 is the cu124 (GPU) build, from the PyTorch index:",
                             "--extra-index-url https://download.pytorch.org/whl/cu124"]),
    ("2.5.1", "12.4", ["# torch 2.5.1 is the CUDA 12.4 build, as the package index serves it for this platform"]),
    ("2.5.1", None, ["# torch 2.5.1 is a CPU build, as the package index serves it for this platform"])])
def test_the_torch_build_is_named_by_its_local_version_tag_or_its_cuda(version, cuda, lines):
    assert environment.torch_build(version, cuda) == lines


def test_the_requirements_file_is_every_line_doctor_writes():
    recorded = {"python": "3.12.1", "platform": "Linux-6.8", "cuda": None,
                "packages": {"my-project": "0.1.0", "pip": "24.0", "torch": "2.13.0+cpu", "tqdm": "4.66.0"},
                "package_sources": {"my-project": "file:///home/me/my-project"}}
    assert environment.requirements_text(recorded, "runs/a", "doctor runs/a --requirements r.txt") == (
        "# The software stack the run in runs/a used, from its environment.json (doctor runs/a --requirements r.txt).\n"
        "# Python 3.12.1 on Linux-6.8: make a fresh virtual environment of that Python, then: "
        "python -m pip install -r THIS_FILE\n"
        "# torch 2.13.0+cpu is the CPU build, from the PyTorch index:\n"
        "--extra-index-url https://download.pytorch.org/whl/cpu\n"
        "# my-project==0.1.0 came from file:///home/me/my-project, not from a package index: install it from "
        "there (this project itself: python -m pip install -e .)\n"
        "torch==2.13.0+cpu\n"
        "tqdm==4.66.0\n")
    no_torch = {"python": "3.12.1", "platform": "Linux-6.8", "packages": {"numpy": "2.2.0"}}  # no sources recorded
    assert environment.requirements_text(no_torch, "runs/b", "doctor").splitlines()[2:] == ["numpy==2.2.0"]


@pytest.mark.parametrize("recorded, portable, devices, why", [
    ({"machine": "aarch64", "device": "cpu"}, False, ["cpu"],
     "the run was made on aarch64 and this machine is x86_64: other kernels, so no bitwise repeat; "
     "verify it on aarch64"),
    ({"machine": "x86_64", "device": "cuda:0", "device_name": "NVIDIA H100"}, False, ["cpu", "mps"],
     "the run trained on cuda:0 (NVIDIA H100); verifying it needs that kind of device, and this machine has only "
     "cpu, mps"),
    ({"machine": "x86_64", "device": "mps", "device_name": "arm"}, False, ["cpu"],
     "the run trained on mps (arm); verifying it needs that kind of device, and this machine has only cpu"),
    ({"machine": "x86_64", "device": "cuda:3"}, False, ["cpu", "cuda:0"], None),  # a GPU of that kind will do
    ({"machine": "x86_64", "device": "cpu"}, True, ["cpu"], "no AVX2 on A"),  # the pins do not fit this CPU
    ({"machine": "x86_64", "device": "cpu"}, False, ["cpu"], None),
    ({}, False, ["cpu"], None),  # a run older than these entries: a CPU run
])
def test_a_run_this_machine_cannot_rerun_is_refused_with_the_reason(recorded, portable, devices, why, monkeypatch):
    """This machine as incompatibility sees it (stand-ins): an x86-64 CPU, the devices, the pins' fit."""
    monkeypatch.setattr(environment, "cpu_info", lambda: {"machine": "x86_64", "model": "A", "flags": {"avx2"}})
    monkeypatch.setattr(environment, "available_devices", lambda: devices)
    monkeypatch.setattr(environment, "portable_problem", lambda here: f"no AVX2 on {here['model']}")
    assert environment.incompatibility(recorded, portable) == why


def a_value_that_differs(value: object) -> object:
    return {**value, "MKL_CBWR": "OTHER"} if isinstance(value, dict) else f"not {value}"


@pytest.mark.parametrize("name", environment.ENVIRONMENT_KEYS)
def test_each_entry_bitwise_equality_depends_on_is_named_when_it_differs_with_its_verdict_and_advice(name):
    recorded = {**dict.fromkeys(environment.ENVIRONMENT_KEYS, "same"), "cpu_kernel_variables": {"MKL_CBWR": "AVX2"},
                "git_commit": "abc"}
    now = {**recorded, "git_commit": "def"}  # informative only: never a difference
    assert environment.environment_differences(recorded, now) == []
    assert environment.explained_differences(recorded, now) == []
    now[name] = a_value_that_differs(recorded[name])
    assert environment.environment_differences(recorded, now) == [f"{name}: {recorded[name]!r} -> {now[name]!r}"]
    verdict, advice = environment.EXPLAINED[name]
    shown = ("MKL_CBWR 'AVX2' -> 'OTHER'" if name == "cpu_kernel_variables" else f"{recorded[name]!r} -> {now[name]!r}")
    assert environment.explained_differences(recorded, now) == [f"{name}: {shown}: {verdict}; {advice}"]
    del recorded[name]  # a run older than the entry
    assert environment.explained_differences(recorded, now) == [
        f"{name}: not recorded (the run is older than this entry); here {now[name]!r}"]
    # A run that predates two more entries: a line for each, the list not cut short by the first.
    older = {key: value for key, value in recorded.items() if key not in ("python", "compute_capability")}
    assert len(environment.explained_differences(older, now)) == 3 - (name in ("python", "compute_capability"))


def test_differences_are_listed_in_the_order_of_the_names_and_each_side_may_lack_one():
    a, b = {"x": 1, "y": [2], "z": None}, {"y": [3], "x": 1, "w": "new"}
    assert environment.differences(a, b) == ["y: [2] -> [3]", "w: None -> 'new'"]  # z: None on both sides
    assert environment.differences(a, b, ("w", "x")) == ["w: None -> 'new'"]
    assert environment.change({"A": "1", "B": "2"}, {"B": "3", "C": "4", "A": "1"}) == "B '2' -> '3', C None -> '4'"
    assert environment.change(1, 4) == "1 -> 4" and environment.change(None, {"A": 1}) == "None -> {'A': 1}"


def test_the_environment_changes_of_a_run_folder_are_against_its_record_or_say_what_is_wrong_with_it(tmp_path):
    now = dict.fromkeys(environment.ENVIRONMENT_KEYS, "here")
    assert environment.environment_changes(tmp_path, now) == ["environment.json is missing"]
    (tmp_path / "environment.json").write_text(json.dumps({**now, "torch": "2.0.0"}))
    assert environment.environment_changes(tmp_path, now) == ["torch: '2.0.0' -> 'here'"]
    (tmp_path / "environment.json").write_text("{")
    [line] = environment.environment_changes(tmp_path, now)
    assert line.startswith(f"{tmp_path / 'environment.json'} is corrupt (")


@pytest.mark.slow
@needs_portable
def test_portable_runs_from_different_shells_give_one_hash_and_native_runs_do_not(tmp_path):
    runs = {f"{mode}_{name}": (("--epochs", "1", "--cpu-kernels", mode), shell)
            for mode in ("native", "portable") for name, shell in SHELLS.items()}
    runs["native_on_an_avx2_machine"] = (("--epochs", "1"), AVX2_MACHINE)
    done = train_many(tmp_path, runs)
    portable = {name: run.weights for name, run in done.items() if name.startswith("portable")}
    native = {name: run.weights for name, run in done.items() if name.startswith("native_") and name[7:] in SHELLS}
    assert len(set(portable.values())) == 1, portable
    assert all(run.environment["cpu_kernel_variables"] == PINS and run.environment["cpu_capability"] == "AVX2"
               for name, run in done.items() if name in portable)
    assert done["native_aten_default"].environment["cpu_capability"] == "DEFAULT"  # ATen obeys the shell natively
    # The negative control: natively, the shell's variables change the bits.
    assert len(set(native.values())) > 1, native
    # What the pins promise: the run this machine makes under them is the one an AVX2 machine makes.
    avx2_run = done["native_on_an_avx2_machine"]
    assert avx2_run.weights == portable["portable_none"]
    # verify, from this test's own shell: a portable run made in the hostile shell reproduces; the
    # native run from the "AVX2 machine" is explained first, then diverges (where this CPU goes past AVX2).
    assert verify.verify(done["portable_all_other"])[0] == 0
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        assert any(line.startswith("cpu_capability: 'AVX2' -> ") and "--cpu-kernels portable" in line
                   for line in verify.machine_check(avx2_run)[1])
        code, lines = verify.verify(avx2_run)
        assert code == 1 and lines[-1].startswith("DIVERGED at step"), lines


@pytest.mark.slow
def test_the_requirements_file_reinstalls_exactly_this_stack(runs, tmp_path):
    """pip, offline, against the packages installed here: every pin is satisfied and nothing would be
    installed; the negative control, a pin that differs, cannot be satisfied offline."""
    requirements = tmp_path / "requirements-run.txt"
    requirements.write_text(environment.requirements_text(runs["seed7"].environment, "runs/a", "test"))
    dry_run = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-r", str(requirements)]
    result = subprocess.run(dry_run, capture_output=True, text=True)
    assert result.returncode == 0 and "Would install" not in result.stdout, result.stdout + result.stderr
    requirements.write_text(requirements.read_text().replace(f"numpy=={runs['seed7'].environment['numpy']}",
                                                             "numpy==0.0.1"))
    assert subprocess.run(dry_run, capture_output=True, text=True).returncode != 0
