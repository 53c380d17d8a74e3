"""The plain PyTorch example (plain/train.py), run as a user runs it: each run a fresh process,
compared by the `weights_sha256` line it prints last."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Trains (fresh processes, seconds each): the full suite runs these, the fast loop (-m 'not slow') leaves them out.
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "plain" / "train.py"


def train(*args: str) -> dict[str, str]:
    """Runs the script in a fresh interpreter; returns its output and the hash it printed last."""
    result = subprocess.run([sys.executable, str(SCRIPT), "--epochs", "2", *args], capture_output=True, text=True,
                            timeout=600)  # a safety net only: a run takes seconds
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"weights_sha256 [0-9a-f]{64}", last), result.stdout
    return {"stdout": result.stdout, "hash": last.split()[1]}


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Seed 0, no workers; its final weights saved for the oracle."""
    weights = tmp_path_factory.mktemp("plain") / "weights.pt"
    run = train("--seed", "0", "--num-workers", "0", "--save-model", str(weights))
    return {**run, "weights": str(weights)}


def test_two_runs_with_one_seed_give_the_same_weights(first: dict[str, str]):
    assert train("--seed", "0", "--num-workers", "0")["hash"] == first["hash"]


def test_zero_and_two_workers_give_the_same_weights(first: dict[str, str]):
    assert train("--seed", "0", "--num-workers", "2")["hash"] == first["hash"]


def test_another_seed_gives_other_weights(first: dict[str, str]):
    # the negative control: the hash does tell runs apart
    assert train("--seed", "1", "--num-workers", "0")["hash"] != first["hash"]


def test_the_printed_hash_and_evaluation_are_those_of_the_saved_weights(first: dict[str, str]):
    """The oracle: the saved weights hash to the printed hash, and evaluated here, in one batch over
    the whole validation set, they get the number right that the script printed."""
    import torch
    from repro_core import state_dict_sha256

    spec = importlib.util.spec_from_file_location("example_plain_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the script's classes; main() runs only as a program

    state = torch.load(first["weights"], weights_only=True)
    assert state_dict_sha256(state) == first["hash"]
    model = module.Net()
    model.load_state_dict(state)
    model.eval()
    _, val_set = module.make_datasets(0)
    x = torch.stack([val_set[i][0] for i in range(len(val_set))])
    y = torch.tensor([val_set[i][1] for i in range(len(val_set))])
    with torch.no_grad():
        output = model(x)
    correct = int((output.argmax(dim=1) == y).sum())
    loss = torch.nn.functional.cross_entropy(output, y).item()

    last_epoch = re.findall(r"val_loss (\S+) val_correct (\d+)/(\d+)", first["stdout"])[-1]
    assert (correct, len(y)) == (int(last_epoch[1]), int(last_epoch[2]))
    assert loss == pytest.approx(float(last_epoch[0]), abs=1e-5)  # printed to 6 places, summed in batches of 64
