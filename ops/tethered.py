"""Run a module as __main__, killed by the kernel when the process that started it dies.

    python -m ops.tethered <parent pid> <module> [args...]

Why: a tool that starts a helper service for its own use (`m1flow data validate` starts a sandbox)
must leave nothing running on any exit, a SIGKILL of the tool included, which no `finally` sees.
Linux's PR_SET_PDEATHSIG does that; elsewhere the helper runs untethered.
"""
from __future__ import annotations

import os
import runpy
import sys

from m1flow.runtime.tether import die_with_parent


def tether(parent: int) -> None:
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the tether held
        sys.exit(1)


def main(argv: list[str]) -> None:
    parent, module, *rest = argv
    tether(int(parent))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
