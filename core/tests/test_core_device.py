"""utils/device.py: a device request is parsed strictly, met or refused in one line, and batches move whole.

The GPU cases fake torch's answers (is_available, device_count): select_device only asks those, and
building a torch.device does not touch CUDA, so nothing here needs a GPU.
"""

from __future__ import annotations

import os
from collections import namedtuple

import pytest
import torch
from repro_core.utils.device import available_devices, device_name, restrict_visible_gpus, select_device, to_device


@pytest.fixture
def cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def twelve_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 12)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.mark.usefixtures("cpu_only")
@pytest.mark.parametrize("spec", ["cpu", "CPU", " cpu ", "auto", " Auto"])
def test_cpu_and_auto_give_the_cpu_on_a_machine_without_gpus(spec: str) -> None:
    assert select_device(spec) == torch.device("cpu")


@pytest.mark.parametrize("spec", ["cuda:x", "gpu", "cuda:", "cuda:-1", "cuda 0", "cuda:0:1", "", "cpu:0", "cuda0"])
def test_what_is_no_device_name_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="is not one of auto, cpu, cuda, cuda:N, mps"):
        select_device(spec)


def test_several_gpus_in_one_name_are_refused_with_the_torchrun_hint() -> None:
    with pytest.raises(ValueError, match="torchrun"):
        select_device("cuda:1,2")
    with pytest.raises(ValueError) as refused:
        device_name("cuda:x")
    assert "torchrun" not in str(refused.value)


@pytest.mark.usefixtures("twelve_gpus")
@pytest.mark.parametrize(("spec", "index"), [("cuda", 0), ("auto", 0), ("cuda:0", 0), ("cuda:1", 1), ("cuda:10", 10),
                                             ("CUDA:11", 11)])
def test_a_gpu_index_of_two_digits_is_parsed_as_that_index(spec: str, index: int) -> None:
    assert select_device(spec) == torch.device("cuda", index)


@pytest.mark.parametrize(("cuda", "mps", "chosen"), [(True, True, torch.device("cuda", 0)),
                                                    (False, True, torch.device("mps")),
                                                    (False, False, torch.device("cpu"))])
def test_auto_prefers_cuda_then_mps_then_the_cpu(cuda: bool, mps: bool, chosen: torch.device,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA, then MPS, then the CPU, as select_device says: a machine that has both trains on CUDA."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert select_device("auto") == chosen


@pytest.mark.usefixtures("twelve_gpus")
@pytest.mark.parametrize("spec", ["cuda:12", "cuda:99"])
def test_a_gpu_beyond_the_machines_is_refused_listing_those_it_has(spec: str) -> None:
    with pytest.raises(ValueError, match="out of range") as refused:
        select_device(spec)
    assert "cuda:11" in str(refused.value) and "cuda:12" not in str(refused.value).split("available")[1]
    assert available_devices() == ["cpu", *(f"cuda:{i}" for i in range(12))]


@pytest.mark.usefixtures("cpu_only")
def test_mps_built_into_torch_but_not_available_is_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS wheels build MPS in; an Intel Mac or an old macOS cannot run it: is_available() decides."""
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    assert available_devices() == ["cpu"]
    with pytest.raises(ValueError, match="available: cpu$"):
        select_device("mps")


@pytest.mark.usefixtures("cpu_only")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "mps"])
def test_a_device_the_machine_lacks_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="not available here; available: cpu$"):
        select_device(spec)


def test_to_device_moves_every_tensor_of_a_nested_batch_and_keeps_its_shape() -> None:
    """The `meta` device stands in for a GPU: a move there is visible on any machine."""
    Pair = namedtuple("Pair", "image label")
    batch = {"x": torch.ones(2), "pairs": [Pair(torch.zeros(1), torch.tensor(3)), (torch.ones(3), "name", 7)],
             "nested": {"deep": [torch.arange(4)]}, "count": 5}
    moved = to_device(batch, torch.device("meta"))
    assert moved["x"].device.type == "meta" and moved["x"].shape == (2,)
    pair, triple = moved["pairs"]
    assert type(pair) is Pair and pair.image.device.type == "meta" and pair.label.device.type == "meta"
    assert type(triple) is tuple and triple[0].device.type == "meta" and triple[1:] == ("name", 7)
    assert type(moved["pairs"]) is list
    assert moved["nested"]["deep"][0].device.type == "meta" and moved["nested"]["deep"][0].dtype == torch.int64
    assert moved["count"] == 5
    assert batch["x"].device.type == "cpu"  # the original batch is left as it was


def test_restrict_visible_gpus_sets_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    restrict_visible_gpus([2, 0])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,0"
    for bad in ([-1], [True], ["1"]):
        with pytest.raises(ValueError):
            restrict_visible_gpus(bad)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="already initialised"):
        restrict_visible_gpus([1])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,0"
