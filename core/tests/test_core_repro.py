"""utils/repro.py: seeds derived as documented, seeds checked, global generators seeded, kernels configured,
the weights hash sensitive to every bit that makes two state_dicts differ, and the string hash seed fixed
by restarting the interpreter."""

from __future__ import annotations

import hashlib
import os
import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from core_helpers import child_env, run_python
from repro_core.engine.loop import seed_micro_step
from repro_core.utils import repro
from repro_core.utils.repro import (
    MAX_SEED,
    Stream,
    check_seed,
    configure_determinism,
    derive_seed,
    determinism_flags,
    keyed_seed,
    seed_everything,
    seed_step,
    set_thread_count,
    state_dict_sha256,
)

MASK64 = 2**64 - 1


@pytest.fixture
def global_generators() -> Iterator[None]:
    """Puts Python's, NumPy's and torch's global generators back as they were."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


@pytest.fixture
def determinism_state() -> Iterator[None]:
    """Puts every setting configure_determinism touches back as it was."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.utils.deterministic.fill_uninitialized_memory, repro.float32_precision(),
             os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]
    torch.utils.deterministic.fill_uninitialized_memory = saved[4]
    repro.set_float32_precision(saved[5]["matmul"], saved[5]["conv"])
    if saved[6] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[6]


# --- derived seeds -------------------------------------------------------------------------------------------


def blake2b_seed(*keys: int) -> int:
    """The documented construction of derive_seed, written out: blake2b (8-byte digest) over the keys
    packed as unsigned 64-bit little-endian words, read back as a little-endian integer."""
    digest = hashlib.blake2b(struct.pack(f"<{len(keys)}Q", *keys), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def splitmix64_finaliser(base: int, high: int, low: int) -> int:
    """keyed_seed's documented construction in NumPy's wrapping uint64 arithmetic (not Python's ints)."""
    with np.errstate(over="ignore"):
        z = np.uint64(base) ^ (np.uint64(high) << np.uint64(32)) ^ np.uint64(low)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return int(z ^ (z >> np.uint64(31)))


@pytest.mark.parametrize("keys", [(0,), (42, Stream.SHUFFLE, 3), (MAX_SEED, 15, 2**40), (1, 2), (2, 1), (1, 2, 0)])
def test_derive_seed_is_blake2b_of_the_keys_as_64_bit_words(keys: tuple[int, ...]) -> None:
    assert derive_seed(*keys) == blake2b_seed(*(int(key) for key in keys))


def test_derive_seed_depends_on_every_key_their_order_and_their_number() -> None:
    base = derive_seed(42, Stream.SHUFFLE, 3)
    others = [derive_seed(43, Stream.SHUFFLE, 3), derive_seed(42, Stream.TRAIN_SAMPLE, 3),
              derive_seed(42, Stream.SHUFFLE, 4), derive_seed(42, 3, Stream.SHUFFLE), derive_seed(42, Stream.SHUFFLE),
              derive_seed(42, Stream.SHUFFLE, 3, 0)]
    assert len({base, *others}) == len(others) + 1
    assert 0 <= base <= MASK64
    assert derive_seed(42, Stream.SHUFFLE) == derive_seed(42, 11)  # a stream is its number


def test_keyed_seed_is_splitmix64s_finaliser() -> None:
    """Vigna's splitmix64.c, seeded 0, outputs 0xe220a8397b1dcdaf then 0x6e789e6aa1b965f4: the finaliser of
    the state after one and two additions of the golden-ratio increment."""
    golden = 0x9E3779B97F4A7C15
    assert keyed_seed(golden, 0, 0) == 0xE220A8397B1DCDAF
    assert keyed_seed(2 * golden & MASK64, 0, 0) == 0x6E789E6AA1B965F4
    rng = random.Random(0)
    for _ in range(200):
        base, high, low = rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32)
        assert keyed_seed(base, high, low) == splitmix64_finaliser(base, high, low)


def test_keyed_seed_gives_every_key_of_one_base_its_own_seed() -> None:
    base = derive_seed(7, Stream.TRAIN_SAMPLE)
    seeds = {keyed_seed(base, high, low) for high in range(40) for low in range(40)}
    assert len(seeds) == 40 * 40
    assert keyed_seed(base, 1, 2) != keyed_seed(base, 2, 1)


# --- check_seed ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [True, False, -1, MAX_SEED + 1, 2**64, 1.0, 3.5, "3", None, np.float64(3)])
def test_check_seed_refuses_what_is_no_integer_in_0_to_2_32_minus_1(seed: object) -> None:
    with pytest.raises(ValueError, match="seed must be an integer"):
        check_seed(seed)


@pytest.mark.parametrize("seed", [0, 1, MAX_SEED, np.int64(5), np.uint32(MAX_SEED), np.int8(3)])
def test_check_seed_accepts_python_and_numpy_integers_as_int(seed: object) -> None:
    checked = check_seed(seed)
    assert type(checked) is int and checked == int(seed)


# --- seeding the global generators ---------------------------------------------------------------------------


def draws() -> tuple[float, list[float], list[float]]:
    return random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist()


def expected_draws(seed: int) -> tuple[float, list[float], list[float]]:
    """What each generator, seeded on its own with `seed`, draws first: not through the global ones."""
    return (random.Random(seed).random(), np.random.RandomState(seed & 0xFFFFFFFF).rand(3).tolist(),
            torch.rand(3, generator=torch.Generator().manual_seed(seed)).tolist())


@pytest.mark.usefixtures("global_generators")
def test_seed_everything_seeds_python_numpy_and_torch() -> None:
    seed_everything(1234)
    first = draws()
    assert first == expected_draws(1234)
    seed_everything(1234)
    assert draws() == first
    seed_everything(1235)
    other = draws()
    assert all(a != b for a, b in zip(other, first, strict=True))
    with pytest.raises(ValueError):
        seed_everything(-1)


@pytest.mark.usefixtures("global_generators")
def test_seed_step_seeds_from_seed_and_step_alone() -> None:
    """What a step draws is the keyed seed of (derive_seed(seed, STEP, 0), step, 0), whatever was drawn before."""
    for seed, step in [(3, 0), (3, 17), (2**32 - 1, 10**6)]:
        torch.rand(5), np.random.rand(5), random.random()  # whatever ran before
        seed_step(seed, step)
        assert draws() == expected_draws(keyed_seed(derive_seed(seed, Stream.STEP, 0), step, 0))


@pytest.mark.usefixtures("global_generators")
def test_seed_micro_step_seeds_from_seed_step_micro_batch_and_rank_alone() -> None:
    """The research loop's key (engine/loop.py): (derive_seed(seed, STEP, rank), step, micro_batch);
    at micro-batch 0 and rank 0 it is seed_step's, so both sizes draw alike on one process."""
    for seed, step, micro, rank in [(3, 0, 0, 0), (3, 17, 1, 0), (3, 17, 1, 2), (2**32 - 1, 10**6, 3, 7)]:
        torch.rand(5), np.random.rand(5), random.random()  # whatever ran before
        seed_micro_step(seed, step, micro, rank)
        assert draws() == expected_draws(keyed_seed(derive_seed(seed, Stream.STEP, rank), step, micro))
    seen = set()
    for key in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]:
        seed_micro_step(3, *key)
        seen.add(tuple(torch.rand(2).tolist()))
    assert len(seen) == 4
    seed_micro_step(3, 17, 0, 0)
    expected = draws()
    seed_step(3, 17)
    assert draws() == expected


def test_a_micro_step_on_a_gpu_seeds_that_gpus_generator_from_its_key(monkeypatch) -> None:
    """Dropout on a GPU draws from the GPU's own generator: keying only the CPU's would leave each
    step's masks to whatever ran before on the GPU (a resume, another worker count: other masks).
    Stand-ins for the current device and the seeding record which GPU is seeded with what (this
    machine may have none); the key is computed here as documented."""
    current, seeded = [0], []

    class MadeCurrent:
        def __init__(self, index: int) -> None:
            self.index, self.before = index, current[0]

        def __enter__(self) -> None:
            current[0] = self.before if self.index == -1 else self.index

        def __exit__(self, *exc_info) -> None:
            current[0] = self.before

    monkeypatch.setattr(torch.cuda, "device", MadeCurrent)
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: seeded.append((current[0], seed)))
    seed_micro_step(3, 17, 1, 2, torch.device("cuda", 1))
    seed_micro_step(3, 17, 0, 0, torch.device("cuda"))
    seed_micro_step(3, 17, 0, 0, torch.device("cpu"))  # the control: a CPU has no generator of its own
    assert seeded == [(1, keyed_seed(derive_seed(3, Stream.STEP, 2), 17, 1)),
                      (0, keyed_seed(derive_seed(3, Stream.STEP, 0), 17, 0))] and current == [0]


# --- the weights hash ----------------------------------------------------------------------------------------


def test_state_dict_sha256_is_the_documented_digest_of_names_dtypes_shapes_and_bytes() -> None:
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([1, -2], dtype=torch.int64)}
    digest = hashlib.sha256()
    for name, tensor in state.items():
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.numpy().tobytes())
    assert state_dict_sha256(state) == digest.hexdigest()


def test_state_dict_sha256_is_equal_for_equal_dicts_built_separately() -> None:
    one = {"layer.weight": torch.linspace(-1, 1, 12).reshape(3, 4), "layer.bias": torch.zeros(3)}
    two = {"layer.weight": torch.linspace(-1, 1, 12).reshape(3, 4).clone(), "layer.bias": torch.zeros(3)}
    assert state_dict_sha256(one) == state_dict_sha256(two)
    transposed = torch.arange(6.0).reshape(3, 2).t()  # not contiguous: hashed as its values, in order
    assert state_dict_sha256({"w": transposed}) == state_dict_sha256({"w": transposed.contiguous()})


def test_state_dict_sha256_changes_with_shape_dtype_name_and_any_bit_of_a_value() -> None:
    values = torch.arange(6, dtype=torch.float32)
    reference = state_dict_sha256({"w": values.reshape(2, 3)})
    nudged = values.clone()
    nudged[4] = torch.nextafter(nudged[4], torch.tensor(10.0))
    signed_zero = values.clone()
    signed_zero[0] = -0.0
    variants = {
        "shape (3, 2)": {"w": values.reshape(3, 2)},
        "shape (6,)": {"w": values},
        "dtype int32, same bytes": {"w": values.reshape(2, 3).view(torch.int32)},
        "name": {"v": values.reshape(2, 3)},
        "one ulp": {"w": nudged.reshape(2, 3)},
        "-0.0": {"w": signed_zero.reshape(2, 3)},
    }
    assert torch.equal(signed_zero, values)  # what a tolerance (or even ==) comparison would call equal
    hashes = {what: state_dict_sha256(state) for what, state in variants.items()}
    assert [what for what, digest in hashes.items() if digest == reference] == []
    assert len(set(hashes.values())) == len(hashes)


# --- kernels and threads -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("determinism_state")
def test_strict_turns_on_deterministic_algorithms_and_the_cudnn_and_cublas_settings() -> None:
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = True, False
    configure_determinism("strict")
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    flags = determinism_flags()
    assert flags["fill_uninitialized_memory"] is True and flags["tf32_allowed"] is False
    assert (flags["float32_precision"]["matmul"], flags["float32_precision"]["conv"]) == ("ieee", "ieee")
    assert torch.empty(16).isnan().all()  # uninitialised memory is filled, so it cannot leak into results


@pytest.mark.usefixtures("determinism_state")
def test_warn_turns_on_deterministic_algorithms_in_warn_only_mode() -> None:
    configure_determinism("warn")
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


@pytest.mark.usefixtures("determinism_state")
def test_off_puts_back_pytorchs_defaults_after_strict() -> None:
    configure_determinism("strict")
    torch.backends.cudnn.benchmark = True
    configure_determinism("off")
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    precision = repro.float32_precision()
    assert (precision["matmul"], precision["conv"]) == (repro.PYTORCH_DEFAULT_FLOAT32["matmul"],
                                                        repro.PYTORCH_DEFAULT_FLOAT32["conv"])


@pytest.mark.usefixtures("determinism_state")
def test_a_users_cublas_workspace_config_is_kept_if_deterministic() -> None:
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    configure_determinism("strict")
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


@pytest.mark.usefixtures("determinism_state")
def test_strict_refuses_once_cuda_has_read_another_cublas_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="CUBLAS_WORKSPACE_CONFIG"):
        configure_determinism("strict")
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


@pytest.mark.usefixtures("determinism_state")
@pytest.mark.parametrize("mode", ["Strict", "on", "", "deterministic"])
def test_an_unknown_determinism_mode_is_refused(mode: str) -> None:
    with pytest.raises(ValueError, match="strict, warn, off"):
        configure_determinism(mode)


def test_set_thread_count_sets_torchs_intra_op_threads() -> None:
    before = torch.get_num_threads()
    try:
        for threads in (1, 3, 1):
            set_thread_count(threads)
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


# --- the string hash seed ------------------------------------------------------------------------------------

RESTART_SCRIPT = """\
import os
import sys

os.environ["PYTHONHASHSEED"] = sys.argv[1]  # the popular fix: too late for this interpreter
# hashseed.py, which repro.py re-exports: the same functions without torch's import in both interpreters
from repro_core.utils.hashseed import hash_seed_in_effect, restart_with_hash_seed

print("start", os.getpid(), hash_seed_in_effect(), flush=True)
if __name__ == "__main__":
    restart_with_hash_seed(int(sys.argv[1]))
    os.environ["PYTHONHASHSEED"] = "123"  # put in later: not in effect
    print("hashed", os.getpid(), hash_seed_in_effect(), hash("abc"), sys.argv[1:], flush=True)
"""


def bare_hash(hash_seed: str) -> str:
    """hash('abc') in a bare interpreter started with PYTHONHASHSEED=hash_seed: the oracle."""
    return run_python("print(hash('abc'))", env=child_env({"PYTHONHASHSEED": hash_seed})).stdout.strip()


def test_restart_with_hash_seed_restarts_once_in_the_same_process_with_the_hash_seed(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(RESTART_SCRIPT, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script), "7"], capture_output=True, text=True,
                            env=child_env(unset=("PYTHONHASHSEED",)))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    lines = [line.split() for line in out.splitlines()]
    # Started without the variable: the os.environ assignment made no difference, so it restarts...
    assert [line[0] for line in lines] == ["start", "start", "hashed"]
    assert lines[0][2] == "random" and lines[1][2] == "7"
    # ...once, keeping its process id and arguments, and hashes as an interpreter started with the seed does;
    assert lines[0][1] == lines[1][1] == lines[2][1]
    assert lines[2][2] == "7" and lines[2][4] == "['7']"
    assert lines[2][3] == bare_hash("7")
    # another seed hashes otherwise (the check above is no accident)
    assert bare_hash("8") != bare_hash("7")



def test_the_hash_seed_module_imports_no_torch_so_a_restart_before_torch_costs_a_bare_start() -> None:
    """The teaching size restarts from its package's __init__.py, before torch loads: that is worth
    it only while utils/hashseed.py (and the package it sits in) imports neither torch nor NumPy."""
    loaded = run_python("""
        import sys
        import repro_core.utils.hashseed
        print(sorted(name for name in ("torch", "numpy") if name in sys.modules))
    """).stdout.strip()
    assert loaded == "[]", f"importing utils/hashseed.py loaded {loaded}"
