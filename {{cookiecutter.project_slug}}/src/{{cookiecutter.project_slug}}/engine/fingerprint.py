"""What this machine computes for the operations a run depends on, each at fixed inputs: the sha256
of each result (forward and gradients). When a run gives other bits on another machine, the two
machines' fingerprints name the first operation where they part: the task's data, NumPy's
functions, one of torch's kernels, an optimizer's update, or the whole first step of this task.

    python -m {{ cookiecutter.project_slug }}.doctor --fingerprint mine.json [--against theirs.json]

doctor computes it twice, each time in a fresh interpreter (the kernel pins are read only when torch
loads): once natively and once under the pins of --cpu-kernels portable, where this CPU takes
them. Each of those interpreters runs the project's operations.py, which adds the digests of the
recipe's own operations (its data, its first step) to this module's: the engine imports no recipe.
A run made with --cpu-kernels portable records its machine's portable digests, for its own
settings, in its folder (fingerprint.json): verify, on a machine that differs, compares them with
its own and names the operation.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .cli import PACKAGE, prog
from .environment import NOTABLE_CPU_FLAGS
from .files import write_json
from .launch import importing_this_copy
from .startup import CPU_KERNEL_VARIABLES, PORTABLE_CPU_KERNELS, cpu_info, portable_problem


def digest(*arrays) -> str:
    """The first 16 hex digits of the sha256 over each array's dtype, shape and bytes."""
    hasher = hashlib.sha256()
    for array in arrays:
        array = array.detach().cpu().contiguous().numpy() if isinstance(array, torch.Tensor) else np.asarray(array)
        hasher.update(f"{array.dtype}{array.shape}".encode())
        hasher.update(np.ascontiguousarray(array).tobytes())
    return hasher.hexdigest()[:16]


def forward_backward(function, *inputs: torch.Tensor, module: nn.Module | None = None) -> str:
    """`function(*inputs)`, then the gradient of a fixed weighting of its output: the forward kernel,
    and the backward kernels of the inputs and of the module's parameters."""
    inputs = [x.requires_grad_() if x.is_floating_point() else x for x in inputs]
    output = function(*inputs)
    output = output[0] if isinstance(output, tuple) else output
    weighting = torch.linspace(-1, 1, output.numel()).reshape(output.shape)
    (output * weighting).sum().backward()
    grads = [x.grad for x in inputs if x.is_floating_point()]
    grads += [p.grad for p in module.parameters()] if module is not None else []
    return digest(output, *grads)


def seeded(index: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(index))


def module(index: int, make) -> nn.Module:
    torch.manual_seed(index)  # its initial weights; this interpreter exists only for the fingerprint
    return make()


def numpy_fingerprints() -> dict[str, str]:
    """NumPy's own SIMD loops (its transcendental functions dispatch by the CPU's features)."""
    x64 = np.linspace(-3.0, 3.0, 4099)
    x32 = x64.astype(np.float32)
    return {f"numpy/{name}": digest(function(x32), function(x64)) for name, function in (
        ("exp", np.exp), ("log", lambda x: np.log(np.abs(x) + 0.5)), ("sin", np.sin), ("tanh", np.tanh))}


def kernel_fingerprints() -> dict[str, str]:
    """torch's kernels of the usual layers, forward and backward."""
    conv = module(3, lambda: nn.Conv2d(3, 8, 3, padding=1))
    lstm = module(8, lambda: nn.LSTM(16, 32, batch_first=True))
    embedding = module(9, lambda: nn.Embedding(100, 16))
    return {
        "torch/matmul": forward_backward(torch.matmul, seeded(1, 64, 96), seeded(2, 96, 48)),
        "torch/linear": forward_backward(lambda x: F.linear(x, seeded(11, 40, 96)), seeded(10, 64, 96)),
        "torch/conv2d": forward_backward(conv, seeded(4, 4, 3, 16, 16), module=conv),
        "torch/batch_norm": forward_backward(lambda x: F.batch_norm(x, None, None, training=True),
                                             seeded(5, 32, 8, 6, 6)),
        "torch/layer_norm": forward_backward(lambda x: F.layer_norm(x, (64,)), seeded(6, 32, 64)),
        "torch/softmax": forward_backward(lambda x: torch.softmax(x, dim=-1), seeded(7, 32, 100)),
        "torch/log_softmax": forward_backward(lambda x: torch.log_softmax(x, dim=-1), seeded(7, 32, 100)),
        "torch/lstm": forward_backward(lstm, seeded(12, 4, 10, 16), module=lstm),
        "torch/embedding": forward_backward(embedding, torch.arange(50) % 100, module=embedding),
    }


def optimizer_fingerprints() -> dict[str, str]:
    """One update of SGD with momentum and of AdamW, from fixed weights and gradients."""
    found = {}
    for name, make in (("sgd", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
                       ("adamw", lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1))):
        weights = nn.Parameter(seeded(20, 256, 64))
        optimizer = make([weights])
        for step in range(2):  # the second step reads the state the first left
            weights.grad = seeded(21 + step, 256, 64)
            optimizer.step()
        found[f"optim/{name}"] = digest(weights)
    return found


OPERATIONS = ("data/train", "data/val", "numpy/exp", "numpy/log", "numpy/sin", "numpy/tanh", "torch/matmul",
              "torch/linear", "torch/conv2d", "torch/batch_norm", "torch/layer_norm", "torch/softmax",
              "torch/log_softmax", "torch/lstm", "torch/embedding", "optim/sgd", "optim/adamw", "task/first_step")


MODES = ("native", "portable")
FORMAT = 1  # of the fingerprint file; a file of another format is refused, not misread
RUN_FILE = "fingerprint.json"  # in the folder of a run made with --cpu-kernels portable


def in_fresh_interpreter(mode: str, config: dict | None = None) -> dict:
    """operations.py run in a new interpreter, natively or under the portable pins (each library reads
    its pin once, as it loads), for a run of `config` (config.json's settings; None: the defaults):
    {"aten": the kernels ATen chose, "operations": {name: digest}}. RuntimeError if it failed."""
    env = {name: value for name, value in os.environ.items() if name not in CPU_KERNEL_VARIABLES}
    env.update(PORTABLE_CPU_KERNELS if mode == "portable" else {})
    env["PYTHONHASHSEED"] = "0"  # nothing here hashes strings into results; fixed all the same
    env = importing_this_copy(env)
    settings = [json.dumps(config)] if config is not None else []
    result = subprocess.run([sys.executable, "-m", f"{PACKAGE}.operations", *settings], capture_output=True,
                            text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"the {mode} fingerprint failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def machine_fingerprint(modes: tuple[str, ...] = MODES, config: dict | None = None, made_by: str | None = None) -> dict:
    """This machine's record: the CPU, the versions, and the digests of each of `modes` (another
    mode, and portable on a CPU that the pins do not fit: None, with why)."""
    cpu, problem = cpu_info(), portable_problem()
    return {"format": FORMAT, "made_by": made_by or f"{prog('doctor')} --fingerprint FILE",
            "date": datetime.date.today().isoformat(), "cpu": cpu["model"], "machine": cpu["machine"],
            "cpu_flags": sorted(NOTABLE_CPU_FLAGS & (cpu["flags"] or set())),
            "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__},
            "portable_problem": problem,
            "modes": {mode: None if mode not in modes or (mode == "portable" and problem)
                      else in_fresh_interpreter(mode, config) for mode in MODES}}


def record_for_run(out: Path, config: dict) -> str | None:
    """A portable run's fingerprint.json: what this machine computes under the pins for the run's
    settings, so that verify on another machine can name the operation where the two part. A fresh
    interpreter builds the task's data and model once more: a few seconds for the example, as
    long as task.make_datasets takes for yours. Why it could not be made, in one line, or None."""
    try:
        record = machine_fingerprint(("portable",), config, made_by=f"{prog('train')} --cpu-kernels portable")
    except (RuntimeError, ValueError) as error:
        return str(error)
    write_json(out / RUN_FILE, record)
    return None


def read_fingerprint(path: Path) -> dict:
    """A fingerprint file, or ValueError saying in one line why it is not one."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {path} as a fingerprint: {getattr(error, 'strerror', None) or error}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("modes"), dict):
        raise ValueError(f"{path} is not a fingerprint of this format (made by {prog('doctor')} --fingerprint)")
    return record


def compare_fingerprints(mine: dict, theirs: dict) -> tuple[list[str], bool]:
    """One line per mode naming the first operation (in the order a run meets them) whose digest
    differs, and whether every operation both hold is the same. An operation only one holds
    (another version of this code) is not compared, and said so."""
    lines, same = [], True
    for mode in MODES:
        here, there = (record["modes"].get(mode) or {} for record in (mine, theirs))
        here, there = here.get("operations", {}), there.get("operations", {})
        if not here or not there:
            lines.append(f"{mode}: not compared ({'this machine' if not here else 'theirs'} has no {mode} record)")
            continue
        shared = [name for name in here if name in there]
        differing = [name for name in shared if here[name] != there[name]]
        unshared = sorted(set(here) ^ set(there))
        note = f"; not in both: {', '.join(unshared)}" if unshared else ""
        if not differing:
            lines.append(f"{mode}: the same in all {len(shared)} operations{note}")
            continue
        same = False
        first = differing[0]
        why = " (the data differs: so does the task's step, whatever the kernels)" if first.startswith("data/") else ""
        lines.append(f"{mode}: differs first at {first}{why}; {len(differing)} of {len(shared)} differ: "
                     f"{', '.join(differing)}{note}")
    return lines, same
