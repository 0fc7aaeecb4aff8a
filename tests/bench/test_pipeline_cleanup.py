"""bench/pipeline.py stopped by SIGTERM mid-run leaves no process behind: broker and services are
stopped by its handlers and `finally`, it prints what it has and exits non-zero with the reason."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow  # the services as processes: not the unit tier (make test-fast)

ROOT = Path(__file__).resolve().parents[2]


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def test_sigterm_mid_run_leaves_no_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    bench = subprocess.Popen([sys.executable, "bench/pipeline.py", "--steps", "1", "--batch", "2", "--group", "2",
                              "--window", "4", "--deadline-s", "600"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    me = psutil.Process(bench.pid)
    seen: dict[int, psutil.Process] = {}
    try:
        # mid-run: the broker is up and a service process has been launched (the start is under way)
        until = time.monotonic() + 300
        while time.monotonic() < until and bench.poll() is None:
            for p in _descendants(me):
                seen.setdefault(p.pid, p)
            cmds = [_cmd(p) for p in seen.values() if _alive(p)]
            if any("kafka.Kafka" in c for c in cmds) and any("svc_" in c for c in cmds):
                break
            time.sleep(0.2)
        assert bench.poll() is None, f"the bench ended before it was killed:\n{bench.stdout.read()}"
        assert any("svc_" in _cmd(p) for p in seen.values()), "no service started within 300 s"
        time.sleep(1.0)
        for p in _descendants(me):
            seen.setdefault(p.pid, p)
        bench.send_signal(signal.SIGTERM)
        output, _ = bench.communicate(timeout=180)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 2, output
    assert "SIGTERM received" in output, output
    assert "| side |" in output, output  # the table, with what it had
    time.sleep(0.5)
    left = [f"{p.pid} {_cmd(p)}" for p in seen.values() if _alive(p)]
    assert not left, f"processes left after SIGTERM: {left}"
