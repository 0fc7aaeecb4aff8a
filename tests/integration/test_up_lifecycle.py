"""`m1flow up` on a first run, as real processes: a source it cannot open refused in one line before
anything starts; the warm start said before it trains; SIGINT and SIGTERM honoured in every phase (warm
start, broker start, service start, running) with the exit code 128 + signal and nothing left behind;
a kill -9 taking the broker, the services and their children along (they are tethered to it).

Each test starts `up` in a session of its own and finds what it started by two marks: the processes
descended from it (a snapshot just before the signal) and the run directory in a command line (the
broker's config, every service's --run-dir). Few services run (`--replicas NAME=0`), so each start
takes seconds, not minutes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from ops import ROOT

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data"
ONLY_SANDBOX = ["--replicas", "reward=0", "learner=0", "rollout=0", "monitor=0"]
START_S = 240  # a start on a busy 2-core machine (one JVM, a few Python services)
STOP_S = 60  # the services' graceful stop is bounded by their stop_grace_s (20 s)


class Up:
    """`m1flow up` in its own session, its output collected line by line."""

    def __init__(self, run_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.run_dir = run_dir
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "ops", "--run-dir", str(run_dir), "up", *args],
                                     cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.seen: dict[int, psutil.Process] = {}

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def descendants(self) -> list[psutil.Process]:
        """Everything it started, and their children; remembered, so that a later look still checks them."""
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
        return list(self.seen.values())

    def wait_until(self, what: str, ready: Callable[[], object], timeout: float = START_S) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = ready()
            if found:
                return found
            if self.proc.poll() is not None:
                raise AssertionError(f"up exited with {self.proc.returncode} before {what}:\n{self.output}")
            time.sleep(0.1)
        raise AssertionError(f"no {what} after {timeout:.0f}s:\n{self.output}")

    def wait_line(self, text: str, timeout: float = START_S) -> str:
        return self.wait_until(f"line {text!r}", lambda: next((ln for ln in self.lines if text in ln), None), timeout)

    def wait_child(self, mark: str, timeout: float = START_S) -> psutil.Process:
        """A process it started (or one of theirs) with `mark` in its command line."""
        return self.wait_until(f"process {mark!r}", lambda: next(
            (p for p in self.descendants() if mark in _cmdline(p)), None), timeout)

    def stop(self, sig: int, timeout: float = STOP_S) -> int:
        self.descendants()
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def left(self, within: float = 10.0) -> list[str]:
        """What it started that still runs `within` seconds on: its descendants, and any process naming its
        run directory."""
        deadline = time.monotonic() + within
        while True:
            alive = [p for p in self.seen.values() if _alive(p)] + _naming(self.run_dir)
            if not alive or time.monotonic() > deadline:
                return sorted({f"{p.pid} {_cmdline(p)[:120]}" for p in alive})
            time.sleep(0.2)

    def clean_up(self) -> None:
        """Whatever a failed test left: the supervisor, then what it started (by pid and by run dir)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for p in [*self.seen.values(), *_naming(self.run_dir)]:
            if _alive(p):
                p.kill()


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _naming(run_dir: Path) -> list[psutil.Process]:
    return [p for p in psutil.process_iter() if str(run_dir) in _cmdline(p) and _alive(p)]


@pytest.fixture
def start(tmp_path):
    started: list[Up] = []

    def make(*args: str, env: dict[str, str] | None = None) -> Up:
        up = Up(tmp_path / "run", *args, env=env)
        started.append(up)
        return up

    yield make
    for up in started:
        up.clean_up()


def interrupted(up: Up, sig: int, phase: str) -> None:
    """It exited with 128 + sig, said so in one line naming the phase, and left nothing running."""
    name = signal.Signals(sig).name
    code = up.stop(sig)
    assert code == 128 + sig, up.output
    said = [ln for ln in up.lines if ln.startswith("m1flow up: ") and name in ln]
    assert said == [f"m1flow up: {name} while {phase}: stopped everything it started"], up.output
    assert "Traceback" not in up.output
    assert up.left() == []
    assert not (up.run_dir / "up.json").exists()


def test_a_source_it_cannot_open_is_one_line_before_anything_starts(start, tmp_path):
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  - path: mixed.jsonl\n  - path: data/missing.jsonl\n")
    (tmp_path / "mixed.jsonl").write_bytes((FIXTURES / "mixed.jsonl").read_bytes())
    up = start("--sources", str(sources))  # no --model: a bad source must not wait for a warm start either
    assert up.proc.wait(120) == 2
    up._reader.join(10)
    assert up.lines == [f"m1flow: error: --sources {sources}: sources[1] ({tmp_path / 'data' / 'missing.jsonl'}) "
                        f"cannot be opened: TableError: {tmp_path / 'data' / 'missing.jsonl'}: no such file or directory"]
    assert not (tmp_path / "run" / "kafka").exists() and not (tmp_path / "run" / "policy0").exists()


def test_sigint_during_the_warm_start_stops_the_training(start, tmp_path):
    """A fresh cache: the warm start has to train (minutes); it says so first, shows its progress, and
    Ctrl-C stops it mid-training (it used to be ignored until the training ended)."""
    up = start(env={"M1FLOW_CACHE": str(tmp_path / "cache")})
    plan = up.wait_line("m1flow up: no --model: training a starting policy first")
    assert "roughly" in plan and str(tmp_path / "cache" / "warmstart-minimax_m1-") in plan
    up.wait_child("ops.warmstart_job")
    progress = up.wait_line("cold start (minimax_m1, arith): step ")  # the training's progress, on up's output
    assert progress.split("step ")[1].split("/")[1].startswith("300,")
    interrupted(up, signal.SIGINT, "warm-starting the policy")  # in the middle of the training loop
    cache = tmp_path / "cache"
    assert not (tmp_path / "run" / "kafka").exists()  # the broker comes after the warm start
    assert [p.name for p in cache.glob("warmstart-*") if p.suffix != ".lock"] == []  # nothing half-trained
    assert not (tmp_path / "run" / "policy0").exists()


def test_sigterm_during_the_broker_start_stops_the_broker(start, hybrid_policy):
    up = start("--model", str(hybrid_policy), *ONLY_SANDBOX)
    broker = up.wait_child("kafka.Kafka")
    interrupted(up, signal.SIGTERM, "starting the broker")
    assert not _alive(broker)


def test_sigint_during_the_service_start_stops_the_services_and_the_broker(start, hybrid_policy):
    up = start("--model", str(hybrid_policy), *ONLY_SANDBOX)
    sandbox = up.wait_child("svc_sandbox")
    interrupted(up, signal.SIGINT, "starting sandbox")
    assert not _alive(sandbox)


def test_sigterm_while_running_stops_everything(start, hybrid_policy):
    up = start("--model", str(hybrid_policy), *ONLY_SANDBOX)
    up.wait_line("stop with Ctrl-C")
    assert {m for m in ("kafka.Kafka", "svc_sandbox") if any(m in _cmdline(p) for p in up.descendants())} \
        == {"kafka.Kafka", "svc_sandbox"}
    interrupted(up, signal.SIGTERM, "running")


def test_a_kill_9_of_up_takes_the_broker_the_services_and_their_children_along(start, hybrid_policy, tmp_path):
    """No `finally` runs on SIGKILL: the kernel kills what `up` started (tethered), and the source's
    reader process dies with the source."""
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps({"sources": [{"path": str(FIXTURES / "mixed.jsonl")}]}))
    up = start("--model", str(hybrid_policy), "--sources", str(sources), *ONLY_SANDBOX)
    source = up.wait_child("svc_source")  # the last to start: the broker and the sandbox run
    reader = up.wait_child("svc_source.reader", timeout=60)
    assert reader.ppid() == source.pid  # a grandchild: the source's read-ahead process
    running = [_cmdline(p) for p in up.descendants() if _alive(p)]
    assert all(any(mark in line for line in running) for mark in ("kafka.Kafka", "svc_sandbox", "svc_source"))
    up.proc.kill()
    up.proc.wait(10)
    assert up.left(within=15) == []


def test_without_a_model_up_says_where_the_starting_policy_comes_from(tmp_path, hybrid_policy):
    """The line `up` says before the warm start: a copy of the cached policy (the fixture cached it), then
    the run's own copy; nothing to say with --model. A copy is made whole or not at all."""
    from ops.stack import Stack, cached_warm_start

    stack = Stack(tmp_path / "run")
    cached = cached_warm_start(stack.warmstart)
    assert stack.policy_plan() == (f"no --model: starting from the cached warm-started policy (minimax_m1, task "
                                   f"arith, 300 SFT steps of 64 examples) in {cached}")
    policy = stack.initial_policy()
    assert (policy / "done.json").exists() and not policy.with_name("policy0.tmp").exists()
    assert Stack(tmp_path / "run").policy_plan() == f"no --model: starting from the policy warm-started earlier in {policy}"
    assert Stack(tmp_path / "run", model=hybrid_policy).policy_plan() is None
