"""Specifications of seeding and determinism settings."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from {{ cookiecutter.project_slug }}.utils.repro import (
    MAX_SEED,
    PYTORCH_DEFAULT_FLOAT32,
    configure_determinism,
    determinism_flags,
    explain_nondeterministic_error,
    float32_precision,
    keyed_seed,
    seed_everything,
    seed_global_generators,
    state_dict_sha256,
    tf32_allowed,
)


@pytest.fixture(autouse=True)
def start_from_defaults(monkeypatch):
    """Each test starts from PyTorch's defaults and no cuBLAS variable (conftest restores both after)."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    configure_determinism("off")


def draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_seed_everything_makes_python_numpy_and_torch_draws_repeat():
    seed_everything(123)
    first = draws()
    seed_everything(123)
    assert draws() == first
    seed_everything(124)
    assert draws() != first


@pytest.mark.parametrize("seed", [-1, MAX_SEED + 1, 1.5, True, "42", None])
def test_seed_everything_refuses_a_seed_outside_0_to_2_32_minus_1(seed):
    with pytest.raises(ValueError, match="seed must be an integer"):
        seed_everything(seed)


def test_the_largest_seed_is_accepted():
    seed_everything(MAX_SEED)


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
    configure_determinism("off")
    assert float32_precision() == PYTORCH_DEFAULT_FLOAT32


def test_warn_is_strict_with_warnings_instead_of_errors():
    configure_determinism("warn")
    flags = determinism_flags()
    assert flags["deterministic_algorithms"] and flags["deterministic_warn_only"]
    assert flags["cudnn_deterministic"] and not flags["cudnn_benchmark"]


def test_off_leaves_pytorchs_defaults():
    configure_determinism("strict")
    configure_determinism("off")
    flags = determinism_flags()
    assert not flags["deterministic_algorithms"] and not flags["cudnn_deterministic"]


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


def test_an_op_that_strict_mode_refuses_is_explained_in_one_line():
    configure_determinism("strict")
    with pytest.raises(RuntimeError) as refused:
        max_unpool()
    line = explain_nondeterministic_error(refused.value, "cuda")
    assert "max_unpooling2d_forward_out" in line and "--deterministic warn" in line and "on the CPU" in line
    assert "\n" not in line
    assert "on the CPU" not in explain_nondeterministic_error(refused.value, "cpu")  # already there
    assert explain_nondeterministic_error(RuntimeError("out of memory"), "cpu") is None


def test_warn_runs_such_an_op_and_warns():
    configure_determinism("warn")
    with pytest.warns(UserWarning, match="does not have a deterministic implementation"):
        max_unpool()


def test_an_existing_deterministic_cublas_config_is_kept(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    configure_determinism("strict")
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


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
    from {{ cookiecutter.project_slug }}.config import Config

    config = Config(max_samples=64)
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
    from {{ cookiecutter.project_slug }}.config import Config

    configure_determinism("strict")
    train_set, _ = task.make_datasets(Config())
    inputs, targets = (torch.stack([torch.as_tensor(part) for part in parts]).cuda()
                       for parts in zip(*(train_set[i] for i in range(64)), strict=True))

    def gradients() -> str:
        seed_everything(11)
        model = task.make_model(Config(), train_set).cuda()
        task.metrics_from_sums(task.batch_sums(model(inputs), targets))["loss"].backward()
        return state_dict_sha256({name: p.grad for name, p in model.named_parameters()})

    assert gradients() == gradients()
