"""Starting the training command in a fresh process, as a user reruns it (verify, doctor, study):
one that dies with the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .cli import PACKAGE
from .signals import die_with_parent


def importing_this_copy(env: dict[str, str]) -> dict[str, str]:
    """`env` with this copy of the package first on PYTHONPATH: a child process imports the code
    that started it, installed or not, and not another copy that happens to be installed."""
    source = str(Path(__file__).resolve().parents[2])
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)}


def launch_training(*args: str, world_size: int = 1, torchrun: bool = False, **popen) -> subprocess.Popen:
    """`python -m <package>.train ARGS` in a fresh process that imports this same copy of the code,
    installed or not; for a world size above 1 (or `torchrun`: --parallel fsdp needs it even for
    one process), under `torchrun --standalone` on this machine."""
    env = importing_this_copy(dict(os.environ))
    launcher = [sys.executable]
    if world_size > 1 or torchrun:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}"]
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    # A Ctrl-C while the child is being forked would raise KeyboardInterrupt inside Python's
    # at-fork hooks, which ignore it: the command would carry on as if never interrupted. So SIGINT
    # waits (blocked) until the child exists, then arrives here as usual; the child unblocks it.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def in_the_child() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        die_with_parent()  # it stops (after its step, with a checkpoint) when this process dies

    try:
        return subprocess.Popen([*launcher, "-m", f"{PACKAGE}.train", *args], env=env, preexec_fn=in_the_child,
                                **popen)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
