"""Stopping cleanly on SIGTERM (schedulers, preemption) and Ctrl-C (SIGINT), and never outliving
the process that started the run."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Asks the kernel (Linux; elsewhere nothing is done) to send this process `signum` when the
    process that started it dies, by SIGKILL too: no training child outlives a killed study,
    verify or doctor, and no torchrun worker outlives its launcher (torchrun starts each worker in
    a process group of its own, which a kill of the launcher's group does not reach). SIGTERM, so
    that the run stops after its step with a checkpoint, as on any SIGTERM. A parent that died
    before the request was made is caught too: this process then stops itself."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):  # no libc to ask
        return
    if os.getppid() != parent:  # the parent is gone already: the kernel will send nothing
        os.kill(os.getpid(), signum)


class StopSignals:
    """Within `with StopSignals() as stop:`, the first SIGTERM or SIGINT sets `stop.signum` and the
    loop stops after the current step, with a checkpoint; a second one exits at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict = {}

    def __enter__(self) -> StopSignals:
        self.previous = {signum: signal.signal(signum, self.request) for signum in (signal.SIGTERM, signal.SIGINT)}
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def request(self, signum: int, frame) -> None:
        if self.signum is not None:
            print(f"\n{signal.Signals(signum).name} again: exiting now, without a checkpoint", file=sys.stderr,
                  flush=True)
            # At once, skipping clean-up that could block (loader workers): every file on disk was
            # written atomically, so the newest checkpoint is intact.
            os._exit(128 + signum)
        self.signum = signum
