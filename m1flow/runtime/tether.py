"""Die with the parent: a child that the kernel kills when the process that started it dies.

Why: a tool that starts helpers for its own use (`m1flow data validate` its sandbox, `m1flow data
profile` its broker and services) must leave nothing running on any exit, a SIGKILL of the tool
included, which no `finally` sees. Linux's PR_SET_PDEATHSIG does that (it survives exec, so a JVM
started with it is tethered too); elsewhere this does nothing.
"""
from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (the thread that forked it) ends.
    Safe as a Popen `preexec_fn` (one libc call, no Python locks)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
