"""What the tests hold of the session's test cluster (tests/k8s/conftest.py starts it), and a
poll helper for the waits on the server (generous: the first run on a loaded machine is slow)."""
from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Kube:
    """A running test cluster: its kubeconfig, the environment that reaches it (PATH with the
    built kubectl, kwok and helm), and thin wrappers that run kubectl and helm against it."""

    run_dir: Path
    kubeconfig: Path
    env: dict[str, str]

    def _run(self, tool: str, args: tuple[str, ...], check: bool, input: str | None,
             timeout: float) -> subprocess.CompletedProcess:
        exe = shutil.which(tool, path=self.env["PATH"])
        assert exe, f"{tool} not on the test cluster's PATH ({self.env['PATH']})"
        out = subprocess.run([exe, *args], env=self.env, input=input, capture_output=True, text=True,
                             timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return out

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
        return self._run("kubectl", args, check, input, timeout)

    def helm(self, *args: str, check: bool = True, input: str | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
        return self._run("helm", args, check, input, timeout)


def until(probe: Callable[[], object], timeout: float, what: str, every: float = 1.0) -> object:
    """Poll probe until it returns something truthy; fail with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout:.0f}s: {what}")
        time.sleep(every)
