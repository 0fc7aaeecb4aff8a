"""Sandbox runs per second on the local jail against a bare subprocess.run of the same program.

The ratio is the price of isolation (namespaces, tmpfs, cgroups, rlimits, privilege drop) per run.
The last row is the price of the system-call filter alone: the jail with and without it, runs
alternating between the two so the machine's load falls on both alike.
Run: PYTHONPATH=. python bench/sandbox_rate.py [runs]
"""
from __future__ import annotations

import subprocess
import sys
import time
from functools import partial

from m1flow.status import Status
from svc_sandbox.api import ExecRequest
from svc_sandbox.backends.jail import JailBackend, JailConfig
from svc_sandbox.sandbox import Sandbox

PROGRAM = "print(sum(range(1000)))"


def _rate(run_once, runs: int) -> float:
    run_once()  # warm caches
    start = time.perf_counter()
    for _ in range(runs):
        run_once()
    return runs / (time.perf_counter() - start)


def _bare(python: str) -> None:
    done = subprocess.run([python, "-c", PROGRAM], capture_output=True, timeout=30, check=True)
    assert done.stdout == b"499500\n"


def _jailed(sandbox: Sandbox) -> None:
    result = sandbox(ExecRequest(code=PROGRAM))
    assert result.status is Status.OK and result.stdout == b"499500\n", result


def _interleaved_rates(first, second, runs: int) -> tuple[float, float]:
    """Runs/s of two callables timed in alternation (one of each per round)."""
    first(), second()  # warm caches
    spent = [0.0, 0.0]
    for _ in range(runs):
        for i, run_once in enumerate((first, second)):
            start = time.perf_counter()
            run_once()
            spent[i] += time.perf_counter() - start
    return runs / spent[0], runs / spent[1]


def measure(runs: int = 20) -> list[tuple[str, float, str, float]]:
    """(name, runs/s, peer name, peer runs/s) for a trivial Python program."""
    rows = []
    for name, config in [("jail python", JailConfig()), ("jail python, rlimits only", JailConfig(use_cgroups=False))]:
        sandbox = Sandbox(JailBackend(config))
        peer = _rate(partial(_bare, sandbox.backend.python), runs)
        rows.append((name, _rate(partial(_jailed, sandbox), runs), "subprocess.run python", peer))
    filtered, unfiltered = Sandbox(JailBackend(JailConfig())), Sandbox(JailBackend(JailConfig(seccomp=False)))
    with_filter, without = _interleaved_rates(partial(_jailed, filtered), partial(_jailed, unfiltered), runs)
    rows.append(("jail python, seccomp filter", with_filter, "jail python, no filter", without))
    return rows


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    print(f"{'sandbox':<28}{'runs/s':>9}   {'peer':<24}{'runs/s':>9}{'ratio':>8}")
    for name, rate, peer, peer_rate in measure(runs):
        print(f"{name:<28}{rate:>9.1f}   {peer:<24}{peer_rate:>9.1f}{rate / peer_rate:>8.2f}")
