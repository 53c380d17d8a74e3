"""Specifications of device choice. CUDA and MPS cases monkeypatch torch, so they run anywhere."""

from __future__ import annotations

import os
from collections import UserDict, namedtuple
from types import MappingProxyType

import pytest
import torch

from {{ cookiecutter.project_slug }}.utils.device import restrict_visible_gpus, select_device, to_device


@pytest.fixture
def no_accelerator(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_auto_takes_the_cpu_when_there_is_no_accelerator(no_accelerator):
    assert select_device("auto") == torch.device("cpu")


@pytest.mark.parametrize(("cuda", "mps", "expected"),
                         [(True, True, "cuda:0"), (True, False, "cuda:0"), (False, True, "mps"), (False, False, "cpu")])
def test_auto_prefers_cuda_then_mps(two_gpus, monkeypatch, cuda, mps, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert select_device("auto") == torch.device(expected)


@pytest.mark.parametrize(
    "spec, expected", [("cpu", "cpu"), ("CUDA", "cuda:0"), ("cuda:1", "cuda:1"), (" cuda:0 ", "cuda:0")]
)
def test_explicit_requests_are_honoured(two_gpus, spec, expected):
    assert select_device(spec) == torch.device(expected)


def test_a_gpu_index_out_of_range_is_refused_with_the_list(two_gpus):
    with pytest.raises(ValueError, match=r"out of range; available: cpu, cuda:0, cuda:1"):
        select_device("cuda:2")


def test_comma_separated_gpus_are_refused_and_point_to_torchrun(two_gpus):
    with pytest.raises(ValueError, match="torchrun"):
        select_device("cuda:1,2")


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:10", "mps"])  # cuda:10: a two-digit index is a GPU index too
def test_an_accelerator_that_is_missing_is_refused_with_the_list(no_accelerator, spec):
    with pytest.raises(ValueError, match="not available here; available: cpu$"):
        select_device(spec)


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:-1", "cuda:x", ""])
def test_malformed_requests_are_refused(no_accelerator, spec):
    with pytest.raises(ValueError, match="is not one of auto, cpu, cuda, cuda:N, mps"):
        select_device(spec)


@pytest.mark.parametrize(("indices", "variable"), [([1, 3], "1,3"), ([0], "0"), ([2, 0], "2,0")])
def test_restricting_gpus_sets_the_variable_before_cuda_starts(monkeypatch, indices, variable):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    restrict_visible_gpus(indices)  # GPU 0 included: the first GPU is as valid a choice as any
    assert os.environ["CUDA_VISIBLE_DEVICES"] == variable


@pytest.mark.parametrize("indices", [[-1], [0, -2], [True], ["1"], [1.0]])
def test_restricting_gpus_to_what_is_no_gpu_index_is_refused_and_leaves_the_variable(monkeypatch, indices):
    """CUDA reads a negative index as "no GPU from here on": a typo would hide every GPU, silently."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ValueError, match="non-negative integers"):
        restrict_visible_gpus(indices)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_restricting_gpus_after_cuda_started_is_refused_not_ignored(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(RuntimeError, match="already initialised"):
        restrict_visible_gpus([1])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_to_device_moves_the_tensors_of_a_mapping_that_is_no_dict():
    """A UserDict, a mappingproxy, transformers' BatchEncoding: any Mapping, given back as a dict."""
    for batch in (UserDict({"x": torch.ones(2)}), MappingProxyType({"x": torch.ones(2)})):
        moved = to_device(batch, torch.device("meta"))
        assert type(moved) is dict and moved["x"].device.type == "meta", type(batch)


def test_to_device_moves_every_tensor_of_a_nested_batch():
    Pair = namedtuple("Pair", "image label")
    batch = {"pair": Pair(torch.ones(2), torch.zeros(2)), "list": [torch.ones(1), (torch.ones(1), "id")], "n": 3}
    moved = to_device(batch, torch.device("meta"))  # a real device change that needs no GPU
    assert isinstance(moved["pair"], Pair) and moved["pair"].image.device.type == "meta"
    assert moved["list"][0].device.type == "meta" and moved["list"][1][0].device.type == "meta"
    assert moved["list"][1][1] == "id" and moved["n"] == 3
    # Each container keeps its type: a task's loss may unpack a tuple, or index a namedtuple by name.
    assert type(moved["list"]) is list and type(moved["list"][1]) is tuple and type(moved) is dict
