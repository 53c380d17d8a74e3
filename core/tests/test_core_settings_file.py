"""`--config FILE`, as the core reads it before torch loads: a .toml or .json table of settings, and
the hash seed and kernel pins taken from it when the command line does not type them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from repro_core.engine import startup


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_toml_and_a_json_file_give_one_table_with_dashed_names_read_as_underscored(tmp_path: Path) -> None:
    toml = write(tmp_path / "run.toml", 'seed = 3\nlr = 0.1\ncpu-kernels = "portable"\n')
    as_json = write(tmp_path / "run.json", json.dumps({"seed": 3, "lr": 0.1, "cpu_kernels": "portable"}))
    expected = {"seed": 3, "lr": 0.1, "cpu_kernels": "portable"}
    assert startup.read_settings_file(toml) == startup.read_settings_file(as_json) == expected


@pytest.mark.parametrize("name, text, says", [
    ("run.yaml", "seed: 3\n", "is neither a .toml nor a .json file"),
    ("missing.toml", None, "cannot be read (No such file or directory)"),
    ("run.toml", "seed = \n", "is not valid TOML: "),
    ("run.json", "{seed: 3}", "is not valid JSON: "),
    ("run.json", "[3]", "does not hold a table of settings"),
    ("run.json", '"seed"', "does not hold a table of settings"),
], ids=["another suffix", "missing", "bad TOML", "bad JSON", "a list", "a string"])
def test_a_file_that_is_no_table_of_settings_is_refused_in_one_line(name: str, text: str | None, says: str,
                                                                     tmp_path: Path) -> None:
    path = tmp_path / name if text is None else write(tmp_path / name, text)
    with pytest.raises(ValueError) as refused:
        startup.read_settings_file(path)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value).strip()


def test_the_hash_seed_and_the_kernel_pins_come_from_the_file_when_the_command_line_has_none(tmp_path: Path) -> None:
    """The relaunch sets what the training process needs before torch loads from the same settings
    that train then reads: a seed given only in the file must seed the hash too."""
    toml = write(tmp_path / "run.toml", "seed = 3\n")
    assert startup.run_environment(["--config", str(toml)], 42)["PYTHONHASHSEED"] == "3"
    assert startup.run_environment([f"--config={toml}"], 42)["PYTHONHASHSEED"] == "3"
    # A flag typed beside the file wins, as it does in train's parser.
    assert startup.run_environment(["--config", str(toml), "--seed", "5"], 42)["PYTHONHASHSEED"] == "5"
    # The negative control: without the file, the default seed.
    assert startup.run_environment([], 42)["PYTHONHASHSEED"] == "42"
    assert startup.setting_from_command_line(["--config", str(toml)], "cpu_kernels", "native", 42) == "native"
    pinned = write(tmp_path / "pinned.json", json.dumps({"cpu_kernels": "portable"}))
    assert startup.setting_from_command_line(["--config", str(pinned)], "cpu_kernels", "native", 42) == "portable"


@pytest.mark.parametrize("text, seed", [("seed = 0\n", "0"), ("seed = 4294967295\n", "4294967295")])
def test_a_seed_at_either_end_of_its_range_in_the_file_seeds_the_hash(text: str, seed: str, tmp_path: Path) -> None:
    """0 is a seed like any other, not "none given": the default would hash strings with another."""
    toml = write(tmp_path / "run.toml", text)
    assert startup.run_environment(["--config", str(toml)], 42)["PYTHONHASHSEED"] == seed


def test_a_file_that_cannot_be_read_leaves_the_default_for_train_to_refuse_in_its_own_words(tmp_path: Path) -> None:
    broken = write(tmp_path / "run.toml", "seed = \n")
    assert startup.run_environment(["--config", str(broken)], 42)["PYTHONHASHSEED"] == "42"
    assert startup.run_environment(["--config", str(tmp_path / "missing.json")], 42)["PYTHONHASHSEED"] == "42"


def test_where_python_cannot_read_toml_a_toml_file_is_refused_in_one_line_naming_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.10 has no tomllib, and the core imports only the standard library, torch and NumPy."""
    monkeypatch.setattr(startup, "tomllib", None)
    with pytest.raises(ValueError, match=r"^is TOML, which Python reads from 3.11 on \(tomllib\): give a .json"):
        startup.read_settings_file(write(tmp_path / "run.toml", "seed = 3\n"))
    assert startup.read_settings_file(write(tmp_path / "run.json", '{"seed": 3}')) == {"seed": 3}


@pytest.mark.parametrize("argv", [
    ["--out=runs/lr=0.1", "--config", "a=b.toml"], ["--out", "runs/lr=0.1", "--config=a=b.toml"],
    ["--seed", "3", "--seed", "5", "--out", "x", "--out=y"], ["--seed=3", "--seed=5"], ["--resume"],
], ids=["a value holding =", "either spelling", "a flag typed twice", "twice with =", "none typed"])
def test_the_scan_before_torch_reads_each_flag_as_trains_parser_does(argv: list[str]) -> None:
    """The hash seed is chosen before torch loads, by a plain scan of the command line: it must read
    what argparse reads (a value holding "=", and the last of a flag typed twice), or a run would
    train one seed with another seed's string hashing."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for name in ("--seed", "--out", "--config"):
        parser.add_argument(name)
    parser.add_argument("--resume", action="store_true")
    parsed = parser.parse_args(argv)
    for name in ("seed", "out", "config"):
        assert startup.flag_value(argv, f"--{name}") == getattr(parsed, name), name


def test_a_cpu_whose_flags_the_system_does_not_say_is_refused_portable_in_one_line() -> None:
    """cpu_info gives flags None where the system does not say (no /proc/cpuinfo flags, a failing
    sysctl): --cpu-kernels portable is then refused in one sentence, not a TypeError at start-up."""
    unknown = {"machine": "x86_64", "model": "a virtual CPU", "flags": None}
    assert startup.portable_problem(unknown) == \
        "--cpu-kernels portable: cannot tell whether this CPU has AVX2 and FMA (the system does not say)"
    assert startup.portable_problem({**unknown, "flags": {"avx2", "fma", "sse2"}}) is None  # the control
    assert "lacks fma" in startup.portable_problem({**unknown, "flags": {"avx2"}})


# The first processor of /proc/cpuinfo on an x86 machine (an AMD EPYC) and on an ARM one (an AWS
# Graviton2: no model name, its instruction sets under Features), each followed by the second.
X86_CPUINFO = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
               "flags\t\t: fpu sse2 avx fma avx2\n\nprocessor\t: 1\nflags\t\t: fpu\n")
ARM_CPUINFO = ("processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 "
               "atomics\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd0c\n\n"
               "processor\t: 1\nFeatures\t: fp\n")


@pytest.mark.parametrize(("cpuinfo", "model", "flags"), [
    (X86_CPUINFO, "AMD EPYC 7B13", {"fpu", "sse2", "avx", "fma", "avx2"}),
    (ARM_CPUINFO, None, {"fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "atomics"}),
    ("processor\t: 0\nBogoMIPS\t: 50.00\n", None, None),
], ids=["x86", "ARM", "neither"])
def test_linux_names_a_cpus_instruction_sets_as_x86_flags_or_arm_features(cpuinfo: str, model: str | None,
                                                                          flags: set[str] | None) -> None:
    """The run's record keeps the CPU's instruction sets, which pick its kernels and so the bits of
    a run: x86 lists them under `flags`, ARM (Graviton, Ampere, Grace) under `Features`; both are
    read, from the first processor only. None only where the system says neither."""
    assert startup.linux_cpu(cpuinfo) == (model, flags)


@pytest.mark.parametrize(("machine", "taken"), [("x86_64", True), ("amd64", True), ("aarch64", False),
                                                ("arm64", False), ("i686", False)])
def test_portable_takes_an_x86_64_cpu_by_either_name_its_system_gives_it(machine: str, taken: bool) -> None:
    """Linux and macOS call the CPU x86_64, Windows AMD64 (cpu_info lowers it): one CPU, one answer;
    another kind is refused in one sentence naming it."""
    problem = startup.portable_problem({"machine": machine, "model": "a CPU", "flags": {"avx2", "fma"}})
    assert (problem is None) if taken else (f"this CPU is {machine}: there is no such pin here" in problem)


# What sysctl says of an Intel Mac (a Core i9-9880H): CPUID leaf 1's features (FMA among them) under
# machdep.cpu.features, leaf 7's (AVX2 among them) under machdep.cpu.leaf7_features.
INTEL_MAC = {
    "machdep.cpu.brand_string": "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz",
    "machdep.cpu.features": "FPU VME DE PSE TSC MSR PAE MCE CX8 APIC SEP MTRR PGE MCA CMOV PAT PSE36 CLFSH DS ACPI "
                            "MMX FXSR SSE SSE2 SS HTT TM PBE SSE3 PCLMULQDQ DTES64 MON DSCPL VMX SMX EST TM2 SSSE3 FMA "
                            "CX16 TPR PDCM SSE4.1 SSE4.2 x2APIC MOVBE POPCNT AES PCID XSAVE OSXSAVE SEGLIM64 TSCTMR "
                            "AVX1.0 RDRAND F16C",
    "machdep.cpu.leaf7_features": "RDWRFSGS TSC_THREAD_OFFSET SGX BMI1 HLE AVX2 SMEP BMI2 ERMS INVPCID RTM FPU_CSDS "
                                  "MPX RDSEED ADX SMAP CLFSOPT IPT MDCLEAR TSXFA IBRS STIBP L1DF SSBD",
}


@pytest.mark.parametrize(("answers", "refusal"), [
    (INTEL_MAC, None),
    ({**INTEL_MAC, "machdep.cpu.leaf7_features": "RDWRFSGS BMI1 SMEP"}, "lacks avx2"),
    ({}, "cannot tell whether this CPU has AVX2 and FMA"),
], ids=["an Intel Mac", "one without AVX2", "sysctl says nothing"])
def test_an_intel_macs_flags_are_read_from_both_of_sysctls_lists(answers: dict, refusal: str | None,
                                                                  monkeypatch) -> None:
    """macOS lists FMA among a CPU's basic features and AVX2 among leaf 7's: read together, an Intel
    Mac that has both may pin portable kernels, as a Linux machine with the same CPU does.
    Stand-ins: the platform and sysctl's answers (this machine is not a Mac)."""
    monkeypatch.setattr(startup, "sys", SimpleNamespace(platform="darwin"))
    monkeypatch.setattr(startup, "platform", SimpleNamespace(machine=lambda: "x86_64", processor=lambda: "i386"))
    monkeypatch.setattr(startup, "sysctl", answers.get)
    cpu = startup.cpu_info()
    assert cpu["model"] == answers.get("machdep.cpu.brand_string", "i386")
    problem = startup.portable_problem(cpu)
    assert problem is None if refusal is None else refusal in problem
