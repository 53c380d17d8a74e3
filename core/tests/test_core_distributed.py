"""Specifications of the engine's torchrun side (engine/distributed.py) and of sharded checkpoints
(engine/checkpoint.py), checked in two real processes joined with gloo on the CPU.

One launch of two ranks serves the whole module: each rank agrees on flags and sums with the other,
shards a small model with FSDP (fully_shard), evaluates and reshards it, trains another, saves two
sharded checkpoints of it, loads the first back, and writes what it saw to rank<N>.pt; the tests below
read those files, and damage copies of the checkpoint folders the ranks wrote. The .metadata unpickler
needs no process at all.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed
from repro_core.engine import distributed
from repro_core.engine.checkpoint import (
    MetadataUnpickler,
    intact_checkpoints,
    load_latest_checkpoint,
    read_sharded_checkpoint,
)

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch has no torch.distributed")

WORLD = 2
SAFETY_TIMEOUT = 300  # seconds; a launch takes a few: this only ends a rank that hangs

# What each rank runs (argv[1]: the folder for its results and the checkpoints). Its model has a
# parameter of the root's own (`scale`), which FSDP keeps gathered after a forward pass, and a
# BatchNorm, whose running statistics are buffers: unsharded, and different on each rank after a
# training step on the rank's own batch.
WORKER = textwrap.dedent('''
    import sys
    from pathlib import Path

    import torch
    from torch import nn
    from torch.distributed.tensor import DTensor

    from repro_core.engine import distributed
    from repro_core.engine.checkpoint import TrainingState, read_sharded_checkpoint, save_sharded_checkpoint
    from repro_core.engine.precision import make_scaler

    CPU = torch.device("cpu")


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp, self.norm, self.out = nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 3)
            self.scale = nn.Parameter(torch.ones(3))  # no block holds it: the root does

        def forward(self, x):
            return self.out(torch.relu(self.norm(self.inp(x)))) * self.scale


    def sharded_state(seed):
        torch.manual_seed(seed)  # the same initial weights on every rank, as train.py seeds them
        model = distributed.wrap(Net(), CPU, "fsdp")
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        return TrainingState(model, optimizer, scheduler, make_scaler("fp32", CPU))


    def local(tensor):
        return (tensor.to_local() if isinstance(tensor, DTensor) else tensor).detach().clone()


    def shards(state):
        """This rank's shards of the weights and of the optimizer's state, by name."""
        found = {name: local(p) for name, p in state.model.named_parameters()}
        for name, p in state.model.named_parameters():
            found.update({f"optimizer.{name}.{key}": local(v) for key, v in state.optimizer.state[p].items()})
        return found


    def buffers(model):
        return {name: buffer.clone() for name, buffer in model.named_buffers()}


    def train_step(state, seed):
        torch.manual_seed(seed)  # a batch of this rank's own
        state.model.train()
        state.model(torch.randn(8, 4)).square().mean().backward()
        state.optimizer.step()
        state.optimizer.zero_grad()


    out = Path(sys.argv[1])
    distributed.join(CPU)
    rank = distributed.rank()
    seen = {"rank": rank, "world_size": distributed.world_size()}

    seen["any_rank_only_rank_0"] = distributed.any_rank(rank == 0)
    seen["any_rank_only_rank_1"] = distributed.any_rank(rank == 1)
    seen["any_rank_none"] = distributed.any_rank(False)
    seen["any_rank_all"] = distributed.any_rank(True)
    seen["max_over_ranks"] = distributed.max_over_ranks([3, 8][rank])
    seen["max_over_ranks_rank_0_largest"] = distributed.max_over_ranks([-2, -7][rank])
    sums = {"loss": torch.tensor([0.1, 1e8, 1.0]) * (rank + 1) + torch.tensor([0.0, 3.0, 0.0]) * rank,
            "samples": torch.tensor([rank + 1]), "errors": torch.tensor(0.7 / (rank + 3))}
    tensors = dict(sums)
    summed = distributed.sum_over_ranks(sums)
    seen["summed"] = summed
    seen["summed_in_place"] = summed is sums and all(summed[name] is tensors[name] for name in tensors)
    seen["summed_names"] = tuple(summed)

    plain = nn.BatchNorm1d(3)
    plain.running_mean.fill_(rank + 1.0)
    plain.running_var.fill_(10.0 * (rank + 1))
    distributed.broadcast_buffers(plain)
    seen["broadcast"] = buffers(plain)

    # An accumulation window of two micro-batches under DDP, each rank's of its own: the first adds
    # up locally (no_sync), the last all-reduces the window's sum.
    torch.manual_seed(0)
    ddp = distributed.wrap(nn.Linear(4, 2), CPU, "ddp")
    for last in (False, True):
        torch.manual_seed(300 + 10 * rank + last)
        with distributed.no_sync(ddp, last_micro_batch=last):
            ddp(torch.randn(4, 4)).square().mean().backward()
        seen[f"gradient_after_{'last' if last else 'first'}_micro_batch"] = ddp.module.weight.grad.clone()

    evaluated = sharded_state(seed=0).model  # a model of its own: one left gathered could not be saved
    seen["is_sharded"] = distributed.is_sharded(evaluated)
    seen["full_shapes"] = {name: tuple(p.shape) for name, p in evaluated.named_parameters()}
    seen["rows_after_wrap"] = {name: local(p).shape[0] for name, p in evaluated.named_parameters()}
    evaluated.eval()
    with torch.no_grad():
        evaluated(torch.randn(2, 4))
    seen["sharded_after_evaluation"] = {name: isinstance(p, DTensor) for name, p in evaluated.named_parameters()}
    distributed.reshard(evaluated)
    seen["sharded_after_reshard"] = {name: isinstance(p, DTensor) for name, p in evaluated.named_parameters()}
    seen["rows_after_reshard"] = {name: local(p).shape[0] for name, p in evaluated.named_parameters()}

    state = sharded_state(seed=0)
    model = state.model
    train_step(state, seed=100 + rank)
    folder = out / "checkpoints"
    seen["buffers_before_save"] = buffers(model)
    state.step = 1
    first = save_sharded_checkpoint(folder, state, {"seed": 0}, 1.0)
    seen["buffers_after_save"] = buffers(model)
    seen["saved"] = shards(state)

    train_step(state, seed=200 + rank)  # the run goes on, and writes a second checkpoint
    state.step = 2
    save_sharded_checkpoint(folder, state, {"seed": 0}, 2.0)
    for buffer in model.buffers():
        buffer.fill_(99)
    seen["moved_on"] = shards(state)

    checkpoint, problem = read_sharded_checkpoint(first)
    seen["problem"] = str(problem)
    state.load_checkpoint(checkpoint, first)  # back to the first checkpoint
    seen["loaded"], seen["buffers_after_load"], seen["step_after_load"] = shards(state), buffers(model), state.step

    fresh = sharded_state(seed=1)  # a resume: a new process's model and optimizer, of other initial weights
    fresh.load_checkpoint(checkpoint, first)
    seen["loaded_fresh"], seen["buffers_fresh"] = shards(fresh), buffers(fresh.model)

    torch.save(seen, out / f"rank{rank}.pt")
    distributed.leave()
''')


@dataclass
class Launch:
    """What each rank saw (by rank), and the folder of the checkpoints they wrote."""

    ranks: list[dict]
    checkpoints: Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_two_ranks(script: str, out: Path) -> None:
    """Runs `script` (argv[1]: `out`) as ranks 0 and 1 of a torchrun-like launch on this host."""
    port, processes, deadline = free_port(), [], time.monotonic() + SAFETY_TIMEOUT
    try:
        for rank in range(WORLD):
            env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
            with open(out / f"rank{rank}.log", "w") as log:
                processes.append(subprocess.Popen([sys.executable, "-c", script, str(out)], env=env, stdout=log,
                                                  stderr=subprocess.STDOUT))
        codes = [process.wait(timeout=max(1.0, deadline - time.monotonic())) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    logs = "\n".join(f"rank {rank}:\n{(out / f'rank{rank}.log').read_text()}" for rank in range(WORLD))
    assert codes == [0] * WORLD, f"a rank failed ({codes}):\n{logs}"


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Launch:
    out = tmp_path_factory.mktemp("two-ranks")
    run_two_ranks(WORKER, out)
    ranks = [torch.load(out / f"rank{rank}.pt", weights_only=True) for rank in range(WORLD)]
    return Launch(ranks, out / "checkpoints")


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """The same names, each with the same bits."""
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def shard_rows(rows: int, rank: int) -> int:
    """The rows of a parameter of `rows` rows that FSDP gives `rank`: torch.chunk's split, the last ones short."""
    chunk = -(-rows // WORLD)
    return max(0, min(chunk, rows - rank * chunk))


# Which process is torchrun's.

TORCHRUN_SETS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.parametrize("present", [
    pytest.param(TORCHRUN_SETS, id="all"), pytest.param((), id="none"),
    *[pytest.param((name,), id=f"only {name}") for name in TORCHRUN_SETS],
    *[pytest.param(tuple(n for n in TORCHRUN_SETS if n != name), id=f"all but {name}") for name in TORCHRUN_SETS]])
def test_a_process_is_torchruns_only_when_every_variable_torchrun_sets_is_there(present, monkeypatch) -> None:
    """Some of these are set for other reasons (a scheduler's RANK, a shell's MASTER_ADDR left from
    another job): a single process that took them for torchrun's would wait for a process group
    that no launcher started."""
    for name in TORCHRUN_SETS:
        monkeypatch.delenv(name, raising=False)
    for name in present:
        monkeypatch.setenv(name, "0")
    assert distributed.under_torchrun() is (len(present) == len(TORCHRUN_SETS))


# Agreeing across ranks: flags, counts and sums.

def test_the_launch_joined_both_ranks_into_one_group(launch: Launch) -> None:
    assert [(seen["rank"], seen["world_size"]) for seen in launch.ranks] == [(0, WORLD), (1, WORLD)]


@pytest.mark.parametrize("name", ["any_rank_only_rank_0", "any_rank_only_rank_1", "any_rank_all"])
def test_any_rank_is_true_on_every_rank_when_one_rank_says_true(launch: Launch, name: str) -> None:
    """Ranks stop at the same step: a rank whose step was not finite stops the others with it."""
    assert [seen[name] for seen in launch.ranks] == [True, True]


def test_any_rank_is_false_on_every_rank_when_no_rank_says_true(launch: Launch) -> None:
    assert [seen["any_rank_none"] for seen in launch.ranks] == [False, False]


def test_max_over_ranks_gives_every_rank_the_largest_number_of_any(launch: Launch) -> None:
    assert [seen["max_over_ranks"] for seen in launch.ranks] == [8, 8]
    assert [seen["max_over_ranks_rank_0_largest"] for seen in launch.ranks] == [-2, -2]


def test_sum_over_ranks_adds_each_named_tensor_over_the_ranks_in_place_to_the_same_bits_on_every_rank(
        launch: Launch) -> None:
    """The oracle: rank 0's tensor plus rank 1's, added here as each rank built them."""
    expected = {"loss": torch.tensor([0.1, 1e8, 1.0]) + (torch.tensor([0.1, 1e8, 1.0]) * 2 + torch.tensor([0, 3.0, 0])),
                "samples": torch.tensor([1 + 2]), "errors": torch.tensor(0.7 / 3) + torch.tensor(0.7 / 4)}
    for seen in launch.ranks:
        assert equal(seen["summed"], expected) and seen["summed_in_place"]
        assert seen["summed_names"] == ("loss", "samples", "errors")  # in the order given
    assert equal(launch.ranks[0]["summed"], launch.ranks[1]["summed"])


def test_under_ddp_a_windows_first_micro_batch_adds_up_locally_and_its_last_all_reduces(launch: Launch) -> None:
    """An all-reduce after every micro-batch would cost a window's worth of communication for one
    step's; one after none would leave each rank stepping on its own gradient."""
    first, last = (tuple(rank[f"gradient_after_{which}_micro_batch"] for rank in launch.ranks)
                   for which in ("first", "last"))
    assert not torch.equal(*first)  # each rank's own batch, not yet reduced
    assert torch.equal(*last)


def test_broadcast_buffers_gives_every_rank_rank_0s_buffers(launch: Launch) -> None:
    for seen in launch.ranks:
        assert torch.equal(seen["broadcast"]["running_mean"], torch.full((3,), 1.0))
        assert torch.equal(seen["broadcast"]["running_var"], torch.full((3,), 10.0))


# FSDP: sharding, and resharding after an evaluation.

def test_wrap_for_fsdp_shards_every_parameter_over_the_ranks(launch: Launch) -> None:
    for rank, seen in enumerate(launch.ranks):
        assert seen["is_sharded"]
        assert seen["rows_after_wrap"] == {name: shard_rows(shape[0], rank)
                                           for name, shape in seen["full_shapes"].items()}


def test_an_evaluation_leaves_the_roots_own_parameters_gathered(launch: Launch) -> None:
    """What reshard is for (FSDP2 keeps the root's parameters gathered after a forward pass, for the
    backward pass it expects): without this the test below would not test reshard."""
    for seen in launch.ranks:
        assert not seen["sharded_after_evaluation"]["scale"]


def test_reshard_after_an_evaluation_puts_every_parameter_back_into_this_ranks_shard(launch: Launch) -> None:
    for rank, seen in enumerate(launch.ranks):
        assert all(seen["sharded_after_reshard"].values()), seen["sharded_after_reshard"]
        assert seen["rows_after_reshard"] == {name: shard_rows(shape[0], rank)
                                              for name, shape in seen["full_shapes"].items()}


# Sharded checkpoints: buffers, and each rank's shards.

def test_each_rank_trained_buffers_of_its_own_before_the_checkpoint(launch: Launch) -> None:
    """Without this, the buffer tests below could not tell rank 0's buffers from rank 1's."""
    rank_0, rank_1 = (seen["buffers_before_save"] for seen in launch.ranks)
    assert not torch.equal(rank_0["norm.running_mean"], rank_1["norm.running_mean"])
    assert not torch.equal(rank_0["norm.running_var"], rank_1["norm.running_var"])


def test_a_sharded_save_gives_every_rank_rank_0s_buffers(launch: Launch) -> None:
    """What is saved and then evaluated is rank 0's, as under DDP."""
    rank_0s = launch.ranks[0]["buffers_before_save"]
    for seen in launch.ranks:
        assert equal(seen["buffers_after_save"], rank_0s)


@pytest.mark.parametrize("after", ["buffers_after_load", "buffers_fresh"])
def test_loading_a_sharded_checkpoint_restores_rank_0s_saved_buffers_on_every_rank(launch: Launch, after: str) -> None:
    """Into the model that went on (its buffers since overwritten), and into a fresh one."""
    rank_0s = launch.ranks[0]["buffers_before_save"]
    for seen in launch.ranks:
        assert equal(seen[after], rank_0s)


def test_the_ranks_saved_shards_of_their_own(launch: Launch) -> None:
    """Without this, a rank that loaded the other rank's shards could pass the test below."""
    rank_0, rank_1 = (seen["saved"] for seen in launch.ranks)
    assert rank_0.keys() == rank_1.keys()
    assert not torch.equal(rank_0["inp.weight"], rank_1["inp.weight"])
    assert not torch.equal(rank_0["optimizer.inp.weight.exp_avg"], rank_1["optimizer.inp.weight.exp_avg"])
    assert any(name.startswith("optimizer.") and name.endswith(".exp_avg_sq") for name in rank_0)


@pytest.mark.parametrize("after", ["loaded", "loaded_fresh"])
def test_each_rank_loads_back_exactly_the_shards_it_saved_of_the_weights_and_optimizer_state(
        launch: Launch, after: str) -> None:
    for seen in launch.ranks:
        assert equal(seen[after], seen["saved"])
        assert not equal(seen["moved_on"], seen["saved"])  # the load changed something back
    assert [seen["step_after_load"] for seen in launch.ranks] == [1, 1]


# Sharded checkpoints: a shard file cut short, on a copy of the folders the two ranks wrote.

def copy_checkpoints(launch: Launch, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of the launch's checkpoint folder: (the folder, its older checkpoint, its newest)."""
    folder = tmp_path / "checkpoints"
    shutil.copytree(launch.checkpoints, folder)
    older, newest = sorted(path for path in folder.iterdir() if path.is_dir())
    return folder, older, newest


def test_two_ranks_write_one_shard_file_each_and_the_checkpoint_reads_back_intact(launch: Launch,
                                                                                   tmp_path: Path) -> None:
    folder, older, newest = copy_checkpoints(launch, tmp_path)
    assert sorted(path.name for path in newest.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    state, problem = read_sharded_checkpoint(newest)
    assert problem is None and state["sharded"] and state["step"] == 2 and state["config"] == {"seed": 0}
    assert [path for _, path in intact_checkpoints(folder, sharded=True, warn=False)] == [newest, older]
    assert [seen["problem"] for seen in launch.ranks] == ["None", "None"]  # as the ranks read it too


@pytest.mark.parametrize("shard", ["__0_0.distcp", "__1_0.distcp"])
@pytest.mark.parametrize("keep", ["all but one byte", "half", "nothing"])
def test_a_shard_file_cut_short_makes_its_checkpoint_not_intact_and_the_one_before_is_resumed(
        launch: Launch, tmp_path: Path, capsys: pytest.CaptureFixture[str], shard: str, keep: str) -> None:
    folder, older, newest = copy_checkpoints(launch, tmp_path)
    size = (newest / shard).stat().st_size
    os.truncate(newest / shard, {"all but one byte": size - 1, "half": size // 2, "nothing": 0}[keep])
    assert read_sharded_checkpoint(newest) == (None, f"shard {shard} is truncated")
    assert [path for _, path in intact_checkpoints(folder, sharded=True, warn=False)] == [older]
    state, path = load_latest_checkpoint(folder, sharded=True)
    assert path == older and state["step"] == 1
    assert capsys.readouterr().err == f"warning: skipping damaged checkpoint {newest} (shard {shard} is truncated)\n"


# Sharded checkpoints: DCP's .metadata is a pickle, opened by an unpickler that runs no code.

def calling(module: str, name: str, argument: str) -> bytes:
    """A pickle (protocol 2) whose loading calls module.name(argument)."""
    text = argument.encode()
    return (b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X" + struct.pack("<I", len(text)) + text
            + b"\x85R.")


class TouchesMarker:
    """An object whose unpickling creates a file, as pickle.dumps writes it (protocol 5: STACK_GLOBAL)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return Path.touch, (self.marker,)


class CallsSystem:
    """An object whose unpickling runs a shell command that creates a file (pickle names posix.system)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return os.system, (f"touch {self.marker}",)


def payloads(marker: Path) -> dict[str, bytes]:
    """Pickles that would create `marker` when loaded, each naming another global."""
    create = f"open({str(marker)!r}, 'w').close()"
    return {"os.system": calling("os", "system", f"touch {marker}"),
            "posix.system": pickle.dumps(CallsSystem(marker)),
            "builtins.eval": calling("builtins", "eval", create),
            "builtins.exec": calling("builtins", "exec", create),
            "pathlib.Path.touch": pickle.dumps(TouchesMarker(marker), protocol=5)}


PAYLOADS = ["os.system", "posix.system", "builtins.eval", "builtins.exec", "pathlib.Path.touch"]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_the_metadata_unpickler_refuses_a_global_outside_dcps_records_without_running_it(
        payload: str, tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL .* is not allowed"):
        MetadataUnpickler(io.BytesIO(payloads(marker)[payload])).load()
    assert not marker.exists()


def test_the_payloads_do_run_code_under_a_plain_unpickler(tmp_path: Path) -> None:
    """The control: each payload, loaded by pickle itself, creates its marker."""
    for name, payload in payloads(tmp_path / "code-ran").items():
        pickle.loads(payload)
        assert (tmp_path / "code-ran").exists(), name
        (tmp_path / "code-ran").unlink()


def test_the_metadata_unpickler_reads_the_metadata_that_dcp_wrote(launch: Launch) -> None:
    from torch.distributed.checkpoint.metadata import Metadata

    newest = sorted(path for path in launch.checkpoints.iterdir() if path.is_dir())[-1]
    with open(newest / ".metadata", "rb") as file:
        metadata = MetadataUnpickler(file).load()
    assert isinstance(metadata, Metadata)
    assert {piece.relative_path for piece in metadata.storage_data.values()} == {"__0_0.distcp", "__1_0.distcp"}


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_checkpoint_whose_metadata_would_run_code_is_refused_unrun_and_the_one_before_is_resumed(
        launch: Launch, tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: str) -> None:
    folder, older, newest = copy_checkpoints(launch, tmp_path)
    marker = tmp_path / "code-ran"
    (newest / ".metadata").write_bytes(payloads(marker)[payload])
    problem = "its .metadata holds objects other than DCP's records, which could run code when loaded"
    assert read_sharded_checkpoint(newest) == (None, problem)
    assert load_latest_checkpoint(folder, sharded=True)[1] == older
    assert capsys.readouterr().err == f"warning: skipping damaged checkpoint {newest} ({problem})\n"
    assert not marker.exists()


def test_a_block_holding_a_layer_tied_to_one_outside_it_is_left_to_the_root() -> None:
    """shard_units: a block is a unit of its own only if every parameter it holds is used inside it
    alone; a block with an output layer tied to the embedding (nanoGPT's lm_head, say) stays with the
    root, since FSDP cannot shard one parameter in two units. No process group is needed to choose."""
    from repro_core.engine.distributed import shard_units
    from torch import nn

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(10, 4)
            self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
            self.head = nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 10, bias=False))  # its norm is its own
            self.head[1].weight = self.embedding.weight

    model = Tied()
    assert shard_units(model) == [model.blocks[0], model.blocks[1]]
    model.head[1].weight = nn.Parameter(model.embedding.weight.detach().clone())  # the control: untied,
    assert shard_units(model) == [model.embedding, model.blocks[0], model.blocks[1], model.head]  # each its own


def test_the_blocks_inside_a_module_dict_are_units_of_their_own_as_inside_a_module_list() -> None:
    """A container without a forward of its own (where a transformer may keep its layers by name) is
    looked through: sharded whole, all its layers would be gathered at once, which sharding avoids."""
    from repro_core.engine.distributed import shard_units
    from torch import nn

    class Named(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleDict({"first": nn.Linear(4, 4), "second": nn.Linear(4, 4)})
            self.stack = nn.ModuleList([nn.Linear(4, 4)])

    model = Named()
    assert shard_units(model) == [model.layers["first"], model.layers["second"], model.stack[0]]


class ScaledBlock(torch.nn.Module):
    """A block with a learned scale of its own around a BatchNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.norm = torch.nn.BatchNorm1d(3)


def test_only_a_module_whose_own_buffers_are_floats_keeps_float32_weights_under_bf16() -> None:
    """FSDP casts a unit's parameters to bf16, not its buffers: a BatchNorm keeps float32 weights
    beside its float32 statistics. A block around it holds parameters but no buffer of its own: cast,
    as the recorded policy says."""
    block = ScaledBlock()
    assert distributed.holds_float_buffers(block.norm)
    assert not distributed.holds_float_buffers(block)
    assert not distributed.holds_float_buffers(torch.nn.Linear(3, 3))  # parameters, no buffer
    assert not distributed.holds_float_buffers(torch.nn.BatchNorm1d(3, affine=False))  # buffers, no parameter


# Evaluating under FSDP: as many forward passes on every rank.

class Batches(list):
    """A rank's evaluation batches, with what evaluation_batches reads of a DataLoader: its dataset,
    keyed (epoch, index), and its collate_fn."""

    dataset = {(0, 0): "the split's first sample"}

    def collate_fn(self, samples: list) -> tuple:
        return ("a batch of", *samples)


@pytest.mark.parametrize("own, most", [(0, 1), (0, 3), (1, 3), (3, 3), (2, 5)])
def test_in_lockstep_a_rank_makes_as_many_forward_passes_as_the_rank_with_the_most_batches(own, most, monkeypatch):
    """FSDP gathers the weights from every rank in each forward pass: a rank that made one pass
    more or fewer than the others would wait for ever. Its own batches are counted, each once; the
    spare passes are its first batch again, or, on a rank with no sample (a split smaller than the
    world), the split's first sample borrowed, none of them counted."""
    monkeypatch.setattr(distributed, "max_over_ranks", lambda number: max(number, most))  # the other ranks' most
    loader = Batches(f"batch {i}" for i in range(own))
    passes = list(distributed.evaluation_batches(loader, lockstep=True))
    assert len(passes) == most
    assert [batch for batch, counted in passes if counted] == list(loader)
    spare = loader[0] if own else ("a batch of", "the split's first sample")
    assert [batch for batch, counted in passes if not counted] == [spare] * (most - own)


def test_out_of_lockstep_a_rank_makes_a_pass_per_batch_and_one_without_samples_one_uncounted(monkeypatch) -> None:
    """DDP holds the whole model on each rank: no pass waits for another rank's. A rank with no
    sample still makes one pass, uncounted: its sums, set to zero, give the evaluation their names."""
    monkeypatch.setattr(distributed, "max_over_ranks", lambda number: pytest.fail("lockstep asked out of lockstep"))
    assert list(distributed.evaluation_batches(Batches(["batch 0", "batch 1"]), lockstep=False)) == [
        ("batch 0", True), ("batch 1", True)]
    assert list(distributed.evaluation_batches(Batches(), lockstep=False)) == [
        (("a batch of", "the split's first sample"), False)]


def test_the_rank_is_torchruns_global_rank_and_the_local_rank_its_place_on_the_machine(monkeypatch) -> None:
    """On several machines, RANK (of every process) and LOCAL_RANK (on this machine) differ: the
    second machine's first process is rank 2 of 4, not a second rank 0 that would write rank 0's files."""
    from repro_core.engine.distributed import context

    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert context() == (2, 0, 4)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name)
    assert context() == (0, 0, 1)  # a plain `python -m`
