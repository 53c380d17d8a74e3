"""Specifications of utils/repro.py (and utils/hashseed.py, its torch-free part): seeds, the hash seed, determinism,
threads, the weights hash."""

from __future__ import annotations

import contextlib
import io
import os
import random
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from {{ cookiecutter.project_slug }}.utils import hashseed, repro
from {{ cookiecutter.project_slug }}.utils.repro import (
    DETERMINISM_MODES,
    MAX_SEED,
    PYTORCH_DEFAULT_FLOAT32,
    Stream,
    configure_determinism,
    derive_seed,
    determinism_flags,
    float32_precision,
    hash_seed_in_effect,
    keyed_seed,
    restart_with_hash_seed,
    seed_everything,
    seed_global_generators,
    seed_step,
    set_float32_precision,
    set_thread_count,
    state_dict_sha256,
    tf32_allowed,
)

from conftest import PACKAGE, python_env, settings


@pytest.fixture(autouse=True)
def start_from_defaults(monkeypatch):
    """Each test starts from PyTorch's defaults and no cuBLAS variable (conftest restores both after)."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    configure_determinism("off")


def draws() -> dict:
    return {"random": random.random(), "numpy": float(np.random.rand()), "torch": torch.rand(3).tolist()}


def test_seed_everything_makes_python_numpy_and_torch_draws_repeat():
    seed_everything(123)
    first = draws()
    seed_everything(123)
    again = draws()
    unseeded = [name for name in first if again[name] != first[name]]
    assert not unseeded, f"seed_everything(123) twice, yet {' and '.join(unseeded)} drew other numbers: not seeded"
    seed_everything(124)
    assert draws() != first


@pytest.mark.parametrize("seed", [-1, MAX_SEED + 1, 1.5, True, "42", None])
def test_seed_everything_refuses_a_seed_outside_0_to_2_32_minus_1(seed):
    with pytest.raises(ValueError, match="seed must be an integer"):
        seed_everything(seed)


@pytest.mark.parametrize("seed", [0, MAX_SEED])
def test_the_smallest_and_the_largest_seed_are_accepted(seed):
    seed_everything(seed)


def test_seed_everything_seeds_the_mps_generator_where_there_is_one(monkeypatch):
    seeded = []
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)  # a stand-in for a Mac's GPU
    monkeypatch.setattr(torch.mps, "manual_seed", seeded.append)
    seed_everything(5)
    assert seeded and set(seeded) == {5}  # (torch.manual_seed seeds it too, in torch 2.13)


def test_strict_turns_on_every_deterministic_setting():
    torch.utils.deterministic.fill_uninitialized_memory = False  # as a script before it may have left it
    configure_determinism("strict")
    flags = determinism_flags()
    assert flags["deterministic_algorithms"] and not flags["deterministic_warn_only"]
    assert flags["cudnn_deterministic"] and not flags["cudnn_benchmark"]
    assert flags["fill_uninitialized_memory"]
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"  # one of the two values NVIDIA documents
    # cuDNN stays on: deterministic algorithms make switching it off unnecessary, and slow.
    assert flags["cudnn_enabled"]


@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_determinism_modes_pin_float32_to_full_precision_no_tf32(mode):
    configure_determinism("off")
    assert tf32_allowed()  # PyTorch's default: cuDNN convolutions may use TF32
    configure_determinism(mode)
    assert float32_precision()["matmul"] == float32_precision()["conv"] == "ieee"
    assert not tf32_allowed() and determinism_flags()["tf32_allowed"] is False
    recorded = determinism_flags()["float32_precision"]  # what environment.json says was in effect
    assert (recorded["matmul"], recorded["conv"]) == ("ieee", "ieee")
    configure_determinism("off")
    assert float32_precision() == PYTORCH_DEFAULT_FLOAT32 == determinism_flags()["float32_precision"]


def test_warn_is_strict_with_warnings_instead_of_errors(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # so that warn itself must set it
    configure_determinism("warn")
    flags = determinism_flags()
    assert flags["deterministic_algorithms"] and flags["deterministic_warn_only"]
    assert flags["cudnn_deterministic"] and not flags["cudnn_benchmark"]
    # cuBLAS's workspace decides whether its products repeat, whatever warn_only says of other ops.
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


@pytest.mark.parametrize(("before", "mode"), [("warn", "strict"), ("strict", "warn")])
def test_a_mode_after_another_in_one_process_is_that_mode(before, mode):
    """A notebook's kernel, or a script calling main() twice, configures one process for run after
    run: strict after warn must raise again, and warn after strict only warn."""
    configure_determinism(before)
    configure_determinism(mode)
    assert determinism_flags()["deterministic_warn_only"] is (mode == "warn")


def test_off_leaves_pytorchs_defaults():
    configure_determinism("strict")
    configure_determinism("off")
    flags = determinism_flags()
    assert not flags["deterministic_algorithms"] and not flags["cudnn_deterministic"]


@pytest.mark.parametrize("mode", DETERMINISM_MODES)
def test_every_mode_turns_cudnn_benchmarking_off_even_after_a_script_turned_it_on(mode):
    # Benchmarking picks each convolution's algorithm by timing, so it can differ between runs;
    # off means PyTorch's defaults, and PyTorch's default is off too.
    torch.backends.cudnn.benchmark = True  # as a snippet copied from a blog post may have left it
    configure_determinism(mode)
    assert determinism_flags()["cudnn_benchmark"] is False


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="strict, warn, off"):
        configure_determinism("sometimes")


def max_unpool():
    """max_unpool2d is documented as having no deterministic implementation, on any device."""
    pooled, indices = torch.nn.functional.max_pool2d(torch.rand(1, 1, 4, 4), 2, return_indices=True)
    return torch.nn.functional.max_unpool2d(pooled, indices, 2)


def test_strict_raises_on_an_op_without_a_deterministic_implementation():
    max_unpool()  # the control: allowed under PyTorch's defaults
    configure_determinism("strict")
    with pytest.raises(RuntimeError, match="does not have a deterministic implementation"):
        max_unpool()


def test_warn_runs_such_an_op_and_warns():
    configure_determinism("warn")
    with pytest.warns(UserWarning, match="does not have a deterministic implementation"):
        max_unpool()


def test_an_existing_deterministic_cublas_config_is_kept(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    configure_determinism("strict")
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


@pytest.mark.parametrize("shell", [":0:0", ":4096:2", "4096:8", ""])
def test_a_cublas_config_from_the_shell_that_nvidia_does_not_document_as_deterministic_is_replaced(shell, monkeypatch):
    """Only ":4096:8" and ":16:8" make cuBLAS repeat; any other value the shell left is replaced
    (while CUDA has not read it yet), not taken as a setting."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", shell)
    configure_determinism("strict")
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_strict_after_cuda_initialised_without_the_cublas_variable_is_refused(monkeypatch):
    """The variable would be set too late to matter; saying so beats a silent non-determinism."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match=r"before any tensor goes to the GPU"):
        configure_determinism("strict")
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_strict_after_cuda_initialised_with_the_variable_already_set_is_fine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    configure_determinism("strict")
    assert torch.are_deterministic_algorithms_enabled()


def test_seeding_the_global_generators_from_a_key_makes_every_generators_draws_repeat():
    """What the loop does before each micro-batch, and the loader before each sample."""
    seed_global_generators(keyed_seed(12345, 3, 1))
    expected = draws()
    seed_everything(4)  # move every generator elsewhere
    seed_global_generators(keyed_seed(12345, 3, 1))
    assert draws() == expected
    seed_global_generators(keyed_seed(12345, 3, 2))
    assert draws() != expected


def test_a_steps_draws_are_a_function_of_seed_and_step_alone():
    """What train.py calls before each forward pass: dropout draws what it drew in any other run."""
    seed_step(7, step=3)
    expected = draws()
    seed_everything(4)  # whatever ran before: a loader, an evaluation, a resume
    seed_step(7, step=3)
    assert draws() == expected
    seed_step(7, step=4)
    assert draws() != expected
    seed_step(8, step=3)
    assert draws() != expected


def test_set_thread_count_sets_torchs_intra_op_threads():
    before = torch.get_num_threads()
    try:
        for threads in (1, 3):
            set_thread_count(threads)
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


# A fresh interpreter that prints the order of a set of strings: Python salts str hashes with a
# value it picks at start-up, from PYTHONHASHSEED if set, so the order is a function of that alone.
SET_ORDER = "print(hash_seed_in_effect(), list({'alpha', 'beta', 'gamma', 'delta', 'epsilon'}))"


def run_python(code: str, *hash_seeds: str) -> list[str]:
    """What `code` prints in a fresh interpreter started from a shell with each hash seed (all at once).
    It imports utils/hashseed.py, which repro.py re-exports: the same functions without torch, whose
    import would cost each interpreter, and each restart, seconds that the hash seed has no part in."""
    imports = f"import os\nfrom {PACKAGE}.utils.hashseed import hash_seed_in_effect, restart_with_hash_seed\n"
    children = [subprocess.Popen([sys.executable, "-c", imports + code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=python_env(PYTHONHASHSEED=hash_seed)) for hash_seed in hash_seeds]
    printed = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-3000:]
        printed.append(out.strip())
    return printed


def test_restart_with_hash_seed_gives_the_order_a_shell_with_that_hash_seed_gives():
    [expected] = run_python(SET_ORDER, "5")
    assert expected.startswith("5 ")
    # Shells that launch the program with other hash seeds: the restart gives each the order of 5.
    assert run_python(f"restart_with_hash_seed(5)\n{SET_ORDER}", "0", "4294967295") == [expected] * 2


def test_negative_control_setting_pythonhashseed_inside_the_script_changes_nothing():
    """The popular snippet: the variable then says 5, but the order is not the one 5 gives, in some
    shell at least: Python read the variable as it started, before the script set it."""
    [expected] = run_python(SET_ORDER, "5")
    orders = run_python("os.environ['PYTHONHASHSEED'] = '5'\n" + SET_ORDER, "0", "1", "2")
    assert set(orders) != {expected}


# SplitMix64's reference generator seeded with 1234567: its first three outputs (Vigna's splitmix64.c).
SPLITMIX64_OF_1234567 = (6457827717110365317, 3203168211198807973, 9817491932198370423)


def test_keyed_seed_is_splitmix64s_finaliser_over_the_base_xor_the_key():
    """Every sample's and step's seed comes from keyed_seed: another mix, however good, would give
    each recorded run other draws when it is run again. The generator adds 0x9E3779B97F4A7C15 to
    its state and returns the finaliser of the sum; the key goes in as base ^ (high << 32) ^ low."""
    state = 1234567
    for expected in SPLITMIX64_OF_1234567:
        state = (state + 0x9E3779B97F4A7C15) % 2**64
        assert keyed_seed(state, 0, 0) == expected
    base, high, low = 0x0123456789ABCDEF, 7, 11
    assert keyed_seed(base, high, low) == keyed_seed(base ^ (high << 32) ^ low, 0, 0)


# derive_seed of a few keys as every recorded run drew them: blake2b with an 8-byte digest over the
# keys as 8-byte little-endian words, read as a little-endian integer.
DERIVED_SEEDS = {(0,): 1786884285633530058, (1234, 11): 11074776600765017374, (1234, 15, 3): 11973495712644431100,
                 (2**64 - 1, 2**32): 11803484771780991531}


def test_derive_seed_gives_the_seeds_every_recorded_run_drew_from():
    """Each stream (the data, the split, the shuffle, the samples, the steps) starts from derive_seed:
    another packing of the keys, however good, would make every recorded run draw otherwise."""
    assert {keys: derive_seed(*keys) for keys in DERIVED_SEEDS} == DERIVED_SEEDS


@pytest.mark.parametrize("matmul_tf32, conv_tf32", [(False, False), (True, False), (False, True), (True, True)])
def test_before_torch_2_9_the_float32_precision_is_read_and_set_through_the_allow_tf32_flags(matmul_tf32, conv_tf32,
                                                                                             monkeypatch):
    """torch>=2.3 is allowed, and torch before 2.9 had allow_tf32 flags, no fp32_precision: stand-ins
    for its backends."""
    matmul, cudnn = SimpleNamespace(allow_tf32=matmul_tf32), SimpleNamespace(allow_tf32=conv_tf32)
    monkeypatch.setattr(torch.backends.cuda, "matmul", matmul)
    monkeypatch.setattr(torch.backends, "cudnn", cudnn)
    name = {False: "ieee", True: "tf32"}
    assert float32_precision() == {"matmul": name[matmul_tf32], "conv": name[conv_tf32],
                                   "float32_matmul_precision": torch.get_float32_matmul_precision()}
    matmul.allow_tf32, cudnn.allow_tf32 = not matmul_tf32, not conv_tf32
    set_float32_precision(name[matmul_tf32], name[conv_tf32])
    assert (matmul.allow_tf32, cudnn.allow_tf32) == (matmul_tf32, conv_tf32)


def started_with(monkeypatch, environ: bytes | None) -> list:
    """A stand-in for the environment this process started with (/proc/self/environ; None: no /proc)."""
    read = []

    def read_bytes(path: str) -> bytes:
        read.append(path)
        if environ is None:
            raise FileNotFoundError(path)
        return environ

    monkeypatch.setattr(hashseed, "Path", lambda path: SimpleNamespace(read_bytes=lambda: read_bytes(path)))
    return read


@pytest.mark.parametrize("environ, in_effect", [
    (b"HOME=/root\0PYTHONHASHSEED=42\0LANG=C.UTF-8\0", "42"), (b"HOME=/root\0", "random"),
    (b"PYTHONHASHSEED=\0", "random"), (b"PYTHONHASHSEEDS=1\0MY_PYTHONHASHSEED=3\0", "random"),
    (b"LS_COLORS=rs=0:di=01;34\0PYTHONHASHSEED=42\0", "42"),  # a value may hold "=" itself
    (b"PLACE=caf\xe9\0\xffNAME=1\0PYTHONHASHSEED=42\0", "42")])  # bytes that are no UTF-8: a Latin-1 shell's
def test_the_hash_seed_in_effect_is_the_one_the_process_started_with_not_one_set_since(environ, in_effect,
                                                                                        monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "7")  # set since the start: not in effect
    read = started_with(monkeypatch, environ)
    assert hash_seed_in_effect() == in_effect and read == ["/proc/self/environ"]


def test_without_proc_the_hash_seed_in_effect_is_what_the_environment_says(monkeypatch):
    read = started_with(monkeypatch, None)  # macOS, Windows
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    assert hash_seed_in_effect() == "7" and read == ["/proc/self/environ"]
    monkeypatch.delenv("PYTHONHASHSEED")
    assert hash_seed_in_effect() == "random"


def test_a_variable_is_missing_unless_the_process_started_with_it_whatever_os_environ_says_now(monkeypatch):
    """What the restart adds: the variables the process did not start with. One put into os.environ
    since (by the script itself, say) is in effect nowhere, since the libraries read them as they
    load; one removed since still is. A process started with none (`env -i`) misses them all."""
    started_with(monkeypatch, b"OMP_NUM_THREADS=1\0")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # set since the start
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # removed since the start
    wanted = {"OMP_NUM_THREADS": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    assert hashseed.missing_from_environment(wanted) == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    started_with(monkeypatch, b"")
    assert hashseed.missing_from_environment(wanted) == wanted


def interpreter(monkeypatch, ignore_environment: int = 0) -> SimpleNamespace:
    """A stand-in for sys as restart_with_hash_seed sees it: `python -m my_project --seed 5`."""
    flushed = []
    stand_in = SimpleNamespace(flags=SimpleNamespace(ignore_environment=ignore_environment),
                               executable="/venv/bin/python", orig_argv=["python", "-m", PACKAGE, "--seed", "5"],
                               stdout=SimpleNamespace(flush=lambda: flushed.append("stdout")), stderr=io.StringIO(),
                               flushed=flushed)
    stand_in.stderr.flush = lambda: flushed.append("stderr")
    monkeypatch.setattr(hashseed, "sys", stand_in)
    return stand_in


def test_the_restart_execs_the_same_command_with_the_hash_seed_set_after_flushing_the_output(monkeypatch):
    """What the restart tests above see through processes, in this one: os.execv (a stand-in)
    replaces the process by the same interpreter and arguments, with the seed in its environment."""
    python, started = interpreter(monkeypatch), []
    monkeypatch.setenv("PYTHONHASHSEED", "1")  # restored after the test
    monkeypatch.setattr(hashseed, "hash_seed_in_effect", lambda: "random")
    monkeypatch.setattr(os, "execv", lambda path, argv: started.append((path, argv, os.environ["PYTHONHASHSEED"],
                                                                       list(python.flushed))))
    restart_with_hash_seed(5)
    assert started == [("/venv/bin/python", ["/venv/bin/python", "-m", PACKAGE, "--seed", "5"], "5",
                        ["stdout", "stderr"])]
    monkeypatch.setattr(hashseed, "hash_seed_in_effect", lambda: "5")  # the restarted interpreter: it goes on
    restart_with_hash_seed(5)
    assert len(started) == 1 and hashseed.RESTARTED not in os.environ  # its children start clean


@pytest.mark.parametrize("seed", [0, 7, MAX_SEED])
def test_the_restart_takes_every_seed_that_seeding_takes(seed, monkeypatch):
    """--seed accepts 0 .. 2**32-1, PYTHONHASHSEED's range: the restart sets each of them (os.execv,
    a stand-in), and refuses what seed_everything refuses."""
    interpreter(monkeypatch)
    started = []
    monkeypatch.setenv("PYTHONHASHSEED", "1")  # restored after the test, as is the restart's marker:
    monkeypatch.setenv(hashseed.RESTARTED, "")  # the stand-in's "restarted process" leaves it set
    monkeypatch.delenv(hashseed.RESTARTED)
    monkeypatch.setattr(hashseed, "hash_seed_in_effect", lambda: "random")
    monkeypatch.setattr(os, "execv", lambda path, argv: started.append(os.environ["PYTHONHASHSEED"]))
    restart_with_hash_seed(seed)
    assert started == [str(seed)]
    for refused in (-1, MAX_SEED + 1, True, 1.5):
        with pytest.raises(ValueError, match="seed must be an integer"):
            restart_with_hash_seed(refused)
    assert started == [str(seed)]


def test_a_restart_that_did_not_take_effect_warns_instead_of_looping(monkeypatch):
    """Something (a wrapper script, say) dropped the variable on the way: the marker the restart
    set says it was tried once; a second would be the same, for ever."""
    python = interpreter(monkeypatch)
    monkeypatch.setenv(hashseed.RESTARTED, "1")
    monkeypatch.setattr(hashseed, "hash_seed_in_effect", lambda: "random")
    monkeypatch.setattr(os, "execv", lambda path, argv: pytest.fail("restarted twice"))
    restart_with_hash_seed(5)
    assert python.stderr.getvalue() == "warning: cannot set PYTHONHASHSEED=5 for this process\n"


def test_under_python_dash_e_the_hash_seed_is_random_and_the_restart_warns_instead_of_looping(monkeypatch):
    python = interpreter(monkeypatch, ignore_environment=1)
    started_with(monkeypatch, b"PYTHONHASHSEED=5\0")
    assert hash_seed_in_effect() == "random"
    monkeypatch.setattr(os, "execv", lambda path, argv: pytest.fail("restarted under -E"))
    restart_with_hash_seed(5)
    assert python.stderr.getvalue() == ("warning: python -E ignores PYTHONHASHSEED, so string hashing stays random "
                                        "(wanted 5)\n")


@pytest.mark.parametrize("device, seeded", [("cpu", []), ("cuda", ["cuda"]), ("mps", ["mps"])])
def test_seeding_for_a_gpu_seeds_that_gpus_generator_too(device, seeded, monkeypatch):
    """Dropout on a GPU draws from the GPU's own generator; a CPU has none of its own. Stand-ins
    for torch.cuda's and torch.mps's manual_seed record what is seeded (this machine may have neither)."""
    calls = []
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: calls.append(("cuda", seed)))
    monkeypatch.setattr(torch.mps, "manual_seed", lambda seed: calls.append(("mps", seed)))
    seed_global_generators(12345, torch.device(device))
    assert calls == [(name, 12345) for name in seeded]


def test_a_step_seeds_the_gpu_it_runs_on_from_the_step_stream_of_its_key(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "manual_seed", calls.append)
    seed_step(7, step=3, device=torch.device("cuda"))
    assert calls == [keyed_seed(derive_seed(7, Stream.STEP, 0), 3, 0)]


def test_seeding_for_a_gpu_by_its_index_seeds_that_gpus_generator_not_the_current_ones(monkeypatch):
    """torch.cuda.manual_seed seeds the generator of the *current* GPU, GPU 0 in a process that never
    called set_device (one process on --device cuda:1): the GPU named must be current while it
    seeds, and the current one current again after. Stand-ins for the current device and for the
    seeding, which records the GPU it found current (this machine may have none)."""
    current, seeded = [0], []

    @contextlib.contextmanager
    def made_current(index: int):
        before = current[0]
        current[0] = before if index == -1 else index  # -1: leaves the current one, as torch does
        try:
            yield
        finally:
            current[0] = before

    monkeypatch.setattr(torch.cuda, "device", made_current)
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: seeded.append((current[0], seed)))
    seed_global_generators(5, torch.device("cuda", 1))
    seed_global_generators(6, torch.device("cuda"))
    seed_step(7, step=3, device=torch.device("cuda:2"))
    assert seeded == [(1, 5), (0, 6), (2, keyed_seed(derive_seed(7, Stream.STEP, 0), 3, 0))] and current == [0]


def test_the_recorded_settings_hold_the_cublas_variable_as_it_is_set(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert determinism_flags()["cublas_workspace_config"] == ":16:8"
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    assert determinism_flags()["cublas_workspace_config"] is None


@pytest.mark.parametrize("matmul, matmul_precision, conv, allowed", [
    ("ieee", "highest", "ieee", False), ("tf32", "highest", "ieee", True), ("ieee", "highest", "tf32", True),
    ("none", "highest", "ieee", False), ("none", "high", "ieee", True), ("none", "medium", "ieee", True),
    ("ieee", "high", "ieee", False)])
def test_tf32_is_allowed_when_products_or_convolutions_may_take_it(matmul, matmul_precision, conv, allowed,
                                                                     monkeypatch):
    """"none" leaves matrix products to torch.set_float32_matmul_precision, where only "highest"
    is full float32; an explicit "ieee" overrides it. A stand-in gives each combination."""
    monkeypatch.setattr(repro, "float32_precision", lambda: {"matmul": matmul, "conv": conv,
                                                             "float32_matmul_precision": matmul_precision})
    assert tf32_allowed() is allowed


def test_keys_that_a_careless_mix_would_collide_get_distinct_seeds():
    """(high, low) and (low, high), neighbours, and sums that seed + epoch + index would merge."""
    keys = [(high, low) for high in range(40) for low in range(40)] + [(1, 2**32 - 1), (2**32 - 1, 1)]
    assert len({keyed_seed(7, high, low) for high, low in keys}) == len(keys)
    assert keyed_seed(7, 1, 2) != keyed_seed(8, 1, 2)  # another base


def test_weights_hash_sees_one_bit_a_name_and_a_dtype():
    weights = {"w": torch.tensor([1.0, 2.0])}
    reference = state_dict_sha256(weights)
    assert state_dict_sha256({"w": torch.tensor([1.0, 2.0])}) == reference
    one_ulp = torch.nextafter(torch.tensor([1.0, 2.0]), torch.tensor(3.0))
    assert state_dict_sha256({"w": one_ulp}) != reference
    assert state_dict_sha256({"v": torch.tensor([1.0, 2.0])}) != reference
    assert state_dict_sha256({"w": torch.tensor([1.0, 2.0], dtype=torch.float64)}) != reference
    assert state_dict_sha256({"w": torch.tensor([1.0, 2.0]).view(torch.int32)}) != reference  # same bytes, other dtype


def test_weights_hash_covers_every_entry_of_the_models_state_dict_integer_buffers_included():
    """The task's model, plus an integer counter of the kind BatchNorm keeps (num_batches_tracked),
    so that the test has one whatever the model: changing any single entry changes the hash."""
    from {{ cookiecutter.project_slug }} import task

    config = settings()
    model = task.make_model(config, task.make_datasets(config)[0])
    weights = {**model.state_dict(), "counter": torch.tensor(3)}
    reference = state_dict_sha256(weights)
    for name, tensor in weights.items():
        changed = tensor.detach().clone()
        changed.view(-1)[0] = ~changed.view(-1)[0] if changed.dtype == torch.bool else changed.view(-1)[0] + 1
        assert state_dict_sha256({**weights, name: changed}) != reference, name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: runs on GPU machines only")
def test_on_cuda_strict_gives_bitwise_identical_gradients_twice():
    from {{ cookiecutter.project_slug }} import task

    configure_determinism("strict")
    train_set, _ = task.make_datasets(settings())
    inputs, targets = (torch.stack([torch.as_tensor(part) for part in parts]).cuda()
                       for parts in zip(*(train_set[i] for i in range(64)), strict=True))

    def gradients() -> str:
        seed_everything(11)
        model = task.make_model(settings(), train_set).cuda()
        task.metrics_from_sums(task.batch_sums(model(inputs), targets))["loss"].backward()
        return state_dict_sha256({name: p.grad for name, p in model.named_parameters()})

    assert gradients() == gradients()
