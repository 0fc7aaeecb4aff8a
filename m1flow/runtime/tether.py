"""Die with the parent: a child that the kernel kills when the process that started it dies.

Why: a tool that starts helpers for its own use (`m1flow data validate` its sandbox, `m1flow data
profile` its broker and services) and `m1flow up` (its broker and services) must leave nothing running
on any exit, a SIGKILL of the tool included, which no `finally` sees. Linux's PR_SET_PDEATHSIG does
that (it survives exec, so a JVM started with it is tethered too); elsewhere this does nothing.

Which thread: the kernel sends the signal when the *thread* that forked the child ends, not the
process. The tools fork every tethered child from their main thread, which in CPython lives as long
as the process (it runs the interpreter's shutdown, joining the other threads first), so a worker
thread that ends can never take a child with it; `require_main_thread` makes that a checked rule.
"""
from __future__ import annotations

import ctypes
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (the thread that forked it) ends.
    Call it in the child itself (ops.tethered does, before it runs or execs the real program)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def require_main_thread(what: str) -> None:
    """Refuse to start a tethered child off the main thread: it would die when that thread ends."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(f"{what}: a tethered child must be started from the main thread (PR_SET_PDEATHSIG "
                           f"fires when the thread that forked it ends; this is {threading.current_thread().name})")
