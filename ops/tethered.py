"""Run a module as __main__, or exec a program, killed by the kernel when the process that started it dies.

    python -m ops.tethered <parent pid> <module> [args...]
    python -m ops.tethered <parent pid> --exec <program> [args...]

Why: a tool that starts a helper service for its own use (`m1flow data validate` starts a sandbox), and
`m1flow up` for its broker and services, must leave nothing running on any exit, a SIGKILL of the tool
included, which no `finally` sees. Linux's PR_SET_PDEATHSIG does that (m1flow.runtime.tether); elsewhere
the helper runs untethered.

Why a wrapper and not a Popen `preexec_fn`: a preexec_fn runs Python between fork and exec, which can
deadlock in a process with threads (`up` has gRPC and Kafka client threads when it restarts a broker).
The setting survives exec, so `--exec` tethers a program that is not Python (the broker's JVM) with no
process in between. The parent pid is checked after the setting: a parent that died before it held
leaves this process to init, and it exits instead of running untethered.
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


def command(parent: int, program: list[str]) -> list[str]:
    """The command line that runs `program` (argv) tethered to process `parent`."""
    return [sys.executable, "-m", "ops.tethered", str(parent), "--exec", *program]


def main(argv: list[str]) -> None:
    parent, module, *rest = argv
    tether(int(parent))
    if module == "--exec":
        os.execvp(rest[0], rest)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
