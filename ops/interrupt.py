"""SIGINT and SIGTERM for a long-running operator command (`m1flow up`): honoured in every phase.

Why an exception: `m1flow up` spends minutes in places that never look at a flag (a warm start's
training loop, a broker's JVM starting, services loading their models), and a handler that only set an
event was ignored there for as long as they took. So the first stop signal raises `Interrupted` in the
main thread, wherever it is (Python runs handlers there, between bytecodes; a blocking sleep, wait or
lock is interrupted), and the `except BaseException` blocks on the way up stop what was started, as
they do for any failure. A few lines must not be torn (a process started but not yet recorded, a
stop under way): they run under `deferred()`, and a signal arriving there is raised as they end.

A second signal while it stops exits at once: the children of `m1flow up` are tethered
(m1flow.runtime.tether), so the kernel kills them with it.
"""
from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A stop signal, raised in the main thread (a BaseException, like KeyboardInterrupt: no
    `except Exception` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


class _Guard:
    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.received: int | None = None  # the first stop signal
        self.deferring = 0  # depth of deferred() sections
        self.pending: int | None = None  # a signal that came inside one

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None or self.pending is not None:  # a second signal: no more waiting
            os.write(2, f"{self.prog}: second {signal.Signals(signum).name}: exiting now\n".encode())
            os._exit(128 + signum)
        if self.deferring:
            self.pending = self.pending or signum
            return
        self.received = signum
        raise Interrupted(signum)


_guard: _Guard | None = None


@contextmanager
def stop_signals(prog: str) -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread while this block runs (call it there)."""
    global _guard
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("stop_signals() must be entered on the main thread (only it runs signal handlers)")
    guard, before = _Guard(prog), {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    _guard = guard
    for sig in STOP_SIGNALS:
        signal.signal(sig, guard.handle)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        _guard = None


@contextmanager
def deferred() -> Iterator[None]:
    """A stop signal that arrives inside this block is raised when it ends (on the main thread, under
    stop_signals; elsewhere this does nothing)."""
    guard = _guard
    if guard is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    guard.deferring += 1
    try:
        yield
    finally:  # the signal wins over an error on its way out (which stays its __context__): it was asked for
        guard.deferring -= 1
        if not guard.deferring and guard.pending is not None:
            signum, guard.pending = guard.pending, None
            guard.received = signum
            raise Interrupted(signum)


def received() -> int | None:
    """The stop signal taken so far, if any (None outside stop_signals)."""
    return _guard.received if _guard is not None else None
