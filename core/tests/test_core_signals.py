"""engine/signals.py, its bookkeeping called directly (the signals themselves, end to end, are the
generated project's tests/test_stop_signals.py and test_study.py): which requests are one stop."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from core_helpers import run_python
from repro_core.engine.signals import PARENT_DIED, PASSED_ON, StopSignals, signal_name


class Exited(Exception):
    """os._exit, in a test: the process would have ended there, with this status."""


def exit_now(status: int) -> None:
    raise Exited(status)


@pytest.mark.skipif(PASSED_ON is None, reason="real-time signals are Linux's")
@pytest.mark.parametrize("order", [("PASSED_ON", "SIGINT"), ("SIGINT", "PASSED_ON"), ("PASSED_ON", "PASSED_ON")])
def test_a_stop_passed_on_and_the_runs_own_ctrl_c_are_one_request_named_as_the_run_got_it(order, monkeypatch):
    monkeypatch.setattr(os, "_exit", exit_now)  # an exit here fails this test, rather than ending pytest
    stop = StopSignals()
    for name in order:
        stop.request(PASSED_ON if name == "PASSED_ON" else getattr(signal, name), None)
    assert stop.signum == (signal.SIGINT if "SIGINT" in order else PASSED_ON)
    assert stop.user_signals == order.count("SIGINT")


@pytest.mark.skipif(PARENT_DIED is None, reason="real-time signals are Linux's")
def test_a_parent_death_signal_repeated_is_one_stop_request_and_a_second_ctrl_c_exits_at_once(monkeypatch):
    """The kernel may send PARENT_DIED again (prctl(2): when a subreaper the process was handed to dies
    too): the same news, so the run still stops after its step, with a checkpoint. The control: a
    user's second signal means "now"."""
    monkeypatch.setattr(os, "_exit", exit_now)
    stop = StopSignals()
    stop.request(PARENT_DIED, None)
    stop.request(PARENT_DIED, None)
    assert (stop.signum, stop.user_signals) == (PARENT_DIED, 0)
    typed = StopSignals()
    typed.request(signal.SIGTERM, None)
    with pytest.raises(Exited) as exited:
        typed.request(signal.SIGINT, None)
    assert exited.value.args == (128 + signal.SIGINT,)


@pytest.mark.skipif(PASSED_ON is None or PARENT_DIED is None, reason="real-time signals are Linux's")
def test_the_real_time_signals_have_names_that_say_what_they_mean():
    assert signal_name(PARENT_DIED) == "its parent process died"
    assert signal_name(PASSED_ON) == "a stop passed on by the command that started it"
    assert signal_name(signal.SIGTERM) == "SIGTERM" and PASSED_ON != PARENT_DIED


@pytest.mark.skipif(PASSED_ON is None or PARENT_DIED is None, reason="real-time signals are Linux's")
def test_each_stop_signal_really_sent_is_a_stop_request_not_the_end_of_the_process() -> None:
    """Sent for real (in a child: a real-time signal's default action ends the process), each of the
    four is taken by the handler and becomes `stop.signum`, so that the run stops after its step with
    a checkpoint; the process lives on to say so."""
    out = run_python("""
        import os, signal
        from repro_core.engine.signals import PARENT_DIED, PASSED_ON, StopSignals, signal_name
        for signum in (PASSED_ON, PARENT_DIED, signal.SIGTERM, signal.SIGINT):
            with StopSignals() as stop:
                os.kill(os.getpid(), signum)
                for _ in range(1000):  # Python runs the handler between bytecodes, at once
                    if stop.signum is not None:
                        break
            print(signal_name(stop.signum) if stop.signum == signum else f"not taken: {signum}")
    """, check=False)
    assert (out.returncode, out.stdout.splitlines()) == (0, [
        "a stop passed on by the command that started it", "its parent process died", "SIGTERM", "SIGINT"])


def test_the_handlers_found_on_entry_are_put_back_on_exit() -> None:
    """After a run inside a process that goes on (a notebook, a study's in-process main()), Ctrl-C
    is what it was before (Python's KeyboardInterrupt), and a handler of the caller's own is its own."""
    def own(signum, frame) -> None:
        pass

    caller_had = signal.signal(signal.SIGTERM, own)
    try:
        with StopSignals() as stop:
            found = stop.previous
            assert found and all(signal.getsignal(signum) == stop.request for signum in found)
        assert {signum: signal.getsignal(signum) for signum in found} == found
        assert found[signal.SIGTERM] is own
    finally:
        signal.signal(signal.SIGTERM, caller_had)


@pytest.mark.skipif(not sys.platform.startswith("linux") or PARENT_DIED is None, reason="prctl is Linux's")
@pytest.mark.parametrize("adopter", [1, 777, None], ids=["init", "a subreaper", "the control: no death"])
def test_a_parent_that_dies_while_the_child_makes_its_request_is_caught(adopter: int | None, monkeypatch) -> None:
    """The kernel sends nothing for a parent that died before the request: the parent read before
    the request, and read again after, tells. Here the parent dies during it (a stand-in libc,
    whose prctl re-parents this process), and the child sends itself PARENT_DIED. The orphan is
    adopted by init, or by a subreaper that is not pid 1 (systemd --user, a container's tini, tmux's
    server, a scheduler's shepherd). The control: a parent that lives on, and nothing is sent."""
    from repro_core.engine import signals

    parents, sent = [4321], []

    class Libc:
        def prctl(self, *args: int) -> int:
            if adopter is not None:
                parents[0] = adopter  # the parent died: the adopter took this process
            return 0

    monkeypatch.setattr(signals.ctypes, "CDLL", lambda *args, **kwargs: Libc())
    monkeypatch.setattr(signals.os, "getppid", lambda: parents[0])
    monkeypatch.setattr(signals.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    signals.die_with_parent()
    assert sent == ([] if adopter is None else [(os.getpid(), PARENT_DIED)])


@pytest.mark.skipif(not sys.platform.startswith("linux") or PARENT_DIED is None, reason="prctl is Linux's")
def test_a_child_asks_for_parent_died_not_sigterm_when_its_parent_dies() -> None:
    """SIGTERM would come once per thread of the dying parent, and a second SIGTERM means "exit now,
    without a checkpoint": the request must be PARENT_DIED. Read back from the kernel (PR_GET_PDEATHSIG)."""
    asked = run_python("""
        import ctypes
        from repro_core.engine.signals import die_with_parent
        libc = ctypes.CDLL(None, use_errno=True)
        before = ctypes.c_int()
        libc.prctl(2, ctypes.byref(before), 0, 0, 0)  # PR_GET_PDEATHSIG
        die_with_parent()
        after = ctypes.c_int()
        libc.prctl(2, ctypes.byref(after), 0, 0, 0)
        print(before.value, after.value)
    """).stdout.split()
    assert asked == ["0", str(int(PARENT_DIED))] and int(PARENT_DIED) != int(signal.SIGTERM)
