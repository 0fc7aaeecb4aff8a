"""Run a module as __main__, killed by the kernel when the process that started it dies.

    python -m m1flow.ops.tethered <parent pid> <module> [args...]

Why: a tool that starts a helper service for its own use (`m1flow data validate` starts a sandbox)
must leave nothing running on any exit, a SIGKILL of the tool included, which no `finally` sees.
Linux's PR_SET_PDEATHSIG does that; elsewhere the helper runs untethered.
"""
from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys

PR_SET_PDEATHSIG = 1


def tether(parent: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the tether held
        sys.exit(1)


def main(argv: list[str]) -> None:
    parent, module, *rest = argv
    tether(int(parent))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
