"""Stopping cleanly on SIGTERM (schedulers, preemption) and Ctrl-C (SIGINT), and never outliving
the process that started the run."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies

# The signal a run asks for when the process that started it dies. Not SIGTERM: the kernel sends
# it each time a thread of the dying parent exits and hands this process on, so a parent with
# threads (torchrun's launcher has several) sends it more than once, and a second SIGTERM means
# "exit now, without a checkpoint". Not SIGHUP, which a terminal's hang-up also sends and `nohup`
# is there to ignore. A real-time signal has no other sender here; StopSignals takes it as one
# stop request however often it comes. (Linux only, as the parent-death signal is.)
PARENT_DIED: int | None = getattr(signal, "SIGRTMIN", None)
# The signal with which a command that started the run (study) passes on a stop it was asked for.
# Not the signal it got: a terminal's Ctrl-C reaches the whole process group, so the run has had
# that SIGINT already, and the same signal again would mean "now, without a checkpoint". This one
# and a SIGTERM or SIGINT of the run's own are one stop request, in either order.
PASSED_ON: int | None = PARENT_DIED + 1 if PARENT_DIED is not None else None
USER_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def die_with_parent() -> None:
    """Asks the kernel (Linux; elsewhere nothing is done) to send this process PARENT_DIED when the
    process that started it dies, by SIGKILL too: no training child outlives a killed study,
    verify or doctor, and no torchrun worker outlives its launcher (torchrun starts each worker in
    a process group of its own, which a kill of the launcher's group does not reach). The run then
    stops after its step with a checkpoint, as on SIGTERM. A parent that died before the request
    was made is caught too: this process then signals itself."""
    if not sys.platform.startswith("linux") or PARENT_DIED is None:
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(PARENT_DIED), 0, 0, 0)
    except (OSError, AttributeError):  # no libc to ask
        return
    if os.getppid() != parent:  # the parent is gone already: the kernel will send nothing
        os.kill(os.getpid(), PARENT_DIED)


def signal_name(signum: int) -> str:
    """SIGTERM, SIGINT, or what PARENT_DIED or PASSED_ON means (a real-time signal has no name of its own)."""
    if signum == PARENT_DIED:
        return "its parent process died"
    if signum == PASSED_ON:
        return "a stop passed on by the command that started it"
    return signal.Signals(signum).name


class StopSignals:
    """Within `with StopSignals() as stop:`, the first SIGTERM, SIGINT, PARENT_DIED or PASSED_ON
    sets `stop.signum` and the loop stops after the current step, with a checkpoint; a second
    SIGTERM or SIGINT exits at once (a user who means "now"). A repeated PARENT_DIED or PASSED_ON
    is the same news again, and so is the first SIGTERM or SIGINT after a PASSED_ON (the Ctrl-C
    that the command passed on reached the run too)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.user_signals = 0  # SIGTERMs and SIGINTs so far
        self.previous: dict = {}

    def __enter__(self) -> StopSignals:
        signums = USER_SIGNALS + tuple(signum for signum in (PARENT_DIED, PASSED_ON) if signum is not None)
        self.previous = {signum: signal.signal(signum, self.request) for signum in signums}
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def request(self, signum: int, frame) -> None:
        if signum not in USER_SIGNALS:  # PARENT_DIED, PASSED_ON: a stop request, never "now"
            self.signum = self.signum or signum
            return
        self.user_signals += 1
        if self.signum in (None, PASSED_ON) and self.user_signals == 1:
            self.signum = signum  # the first stop request, or the one a command passed on: named as typed
            return
        print(f"\n{signal_name(signum)} again: exiting now, without a checkpoint", file=sys.stderr, flush=True)
        # At once, skipping clean-up that could block (loader workers): every file on disk was
        # written atomically, so the newest checkpoint is intact.
        os._exit(128 + signum)
