"""The faults a chaos run injects, and the log of what was injected when.

Processes are found through the supervisor's `up.json` (pids with their create times) and the
broker's `broker.json`, exactly as `m1flow down` finds them, so a fault hits the process the
supervisor is running now, not one it already replaced.
"""
from __future__ import annotations

import json
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from m1flow.bus import Producer, codec
from m1flow.bus.topics import ROLLOUTS, SCORED
from m1flow.contracts import events

SERVICE_FAULTS = ("kill9", "sigterm")
BROKER_FAULTS = ("broker_freeze", "broker_kill9")
INPUT_FAULTS = ("garbage_rollouts", "garbage_scored", "truncated_scored")
# which consumer groups must dead-letter a bad record on each topic
READERS = {"rollouts": ("m1flow-reward", "m1flow-monitor"), "scored": ("m1flow-learner", "m1flow-monitor")}


@dataclass(frozen=True)
class Fault:
    at_s: float  # seconds after the chaos phase starts
    kind: str
    target: str = ""  # service name for service faults
    seconds: float = 0.0  # how long a broker freeze lasts

    def __str__(self) -> str:
        what = f"{self.kind} {self.target}".strip()
        return f"{what} ({self.seconds:.0f}s)" if self.seconds else what


@dataclass
class Injected:
    fault: Fault
    wall: float  # time.time() when injected
    note: str = ""
    bad_records: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, offset)


@dataclass
class FaultLog:
    entries: list[Injected] = field(default_factory=list)

    @property
    def bad_records(self) -> list[tuple[str, int, int]]:
        return [rec for entry in self.entries for rec in entry.bad_records]


def plan(seed: int, cycles: int, services: tuple[str, ...], spacing_s: float = 12.0,
         freeze_s: float = 10.0) -> list[Fault]:
    """`cycles` rounds, each hitting every service once (kill -9 or SIGTERM at random), the broker
    once (frozen or killed) and the input once (garbage or a truncated message), in random order
    with random gaps around `spacing_s`."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = 0.0
    for _ in range(cycles):
        round_ = [Fault(0, rng.choice(SERVICE_FAULTS), name) for name in services]
        round_.append(Fault(0, rng.choice(BROKER_FAULTS), seconds=freeze_s))
        round_ += [Fault(0, rng.choice(INPUT_FAULTS))]
        rng.shuffle(round_)
        for fault in round_:
            t += rng.uniform(0.5, 1.5) * spacing_s
            faults.append(Fault(round(t, 1), fault.kind, fault.target, fault.seconds))
    return faults


class Injector:
    """Applies faults to the `m1flow up` of one run directory."""

    def __init__(self, run_dir: Path, bootstrap: str) -> None:
        self.run_dir = Path(run_dir)
        self.bootstrap = bootstrap
        self.log = FaultLog()
        self.producer = Producer(bootstrap, "chaos")

    def inject(self, fault: Fault) -> Injected:
        entry = Injected(fault, time.time())
        if fault.kind in SERVICE_FAULTS:
            entry.note = self._signal_service(fault.target, signal.SIGKILL if fault.kind == "kill9" else signal.SIGTERM)
        elif fault.kind == "broker_freeze":
            entry.note = self._freeze_broker(fault.seconds)
        elif fault.kind == "broker_kill9":
            entry.note = self._signal_broker(signal.SIGKILL)
        else:
            entry.bad_records = self._bad_input(fault.kind)
            entry.note = ", ".join(f"{t}/{p}@{o}" for t, p, o in entry.bad_records)
        self.log.entries.append(entry)
        return entry

    def close(self) -> None:
        self.producer.close()

    # ------------------------------------------------------------------ processes
    def _service_pid(self, name: str) -> int | None:
        state = json.loads((self.run_dir / "up.json").read_text())
        for entry in state.get("services", []):
            if entry["name"] == name:
                try:
                    proc = psutil.Process(entry["pid"])
                    if abs(proc.create_time() - entry["started_at"]) < 0.01 and proc.is_running():
                        return proc.pid
                except psutil.NoSuchProcess:
                    return None
        return None

    def _signal_service(self, name: str, sig: int) -> str:
        pid = self._service_pid(name)
        if pid is None:
            return "not running (already down)"
        os.killpg(pid, sig)
        return f"pid {pid}"

    def _broker_pid(self) -> int | None:
        from ops.kafka import Broker

        state = Broker(self.run_dir / "kafka").state()
        return state.pid if state and psutil.pid_exists(state.pid) else None

    def _signal_broker(self, sig: int) -> str:
        pid = self._broker_pid()
        if pid is None:
            return "not running"
        os.killpg(pid, sig)
        return f"pid {pid}"

    def _freeze_broker(self, seconds: float) -> str:
        """SIGSTOP the broker: connections stay open and nothing answers, like a long GC pause or a
        partition; the supervisor sees it alive and must not (cannot) help."""
        pid = self._broker_pid()
        if pid is None:
            return "not running"
        os.killpg(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.killpg(pid, signal.SIGCONT)
        return f"pid {pid} frozen {seconds:.0f}s"

    # ------------------------------------------------------------------ bad input
    def _bad_input(self, kind: str) -> list[tuple[str, int, int]]:
        if kind == "garbage_rollouts":
            future = self.producer.send_bytes(ROLLOUTS, "chaos", b"\x00\xffnot an m1flow record")
        elif kind == "garbage_scored":
            future = self.producer.send_bytes(SCORED, "chaos", b"M1\x00\x63garbage from a newer producer")
        else:  # a real-looking ScoredGroup cut in half: must be rejected, not trained as half a group
            group = events.ScoredGroup(header=codec.header("chaos", group_id="chaos-truncated"),
                                       group_id="chaos-truncated", group_size=8)
            for i in range(8):
                group.samples.add(rollout_id=f"chaos-truncated/{i}", index=i, reward=float(i % 2),
                                  prompt_token_ids=[1, 2], token_ids=[3, 4], logprobs=[-0.1, -0.2])
            data = codec.encode(group)
            future = self.producer.send_bytes(SCORED, "chaos-truncated", data[: len(data) // 2])
        self.producer.flush()
        meta = future.get(timeout=60)
        return [(meta.topic, meta.partition, meta.offset)]
