"""Stopping cleanly on SIGTERM (schedulers, preemption) and Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import signal
import sys


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
