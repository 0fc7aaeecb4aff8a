"""Is this consumer making progress? The health a supervisor restarts a service on.

A consumer can be alive and useless: stuck joining its group, assigned partitions it never reads,
a handler that never returns, or cut off from the broker. None of these raise; the process keeps
its heartbeats (or keeps retrying) and says SERVING, and whatever supervises it never acts. A
watchdog thread therefore checks, every few seconds, what the consumer's own loop reports (records
handled, steps completed, partitions owned, throttled or not) against what the broker says (end
offsets and the group's committed offsets of the partitions this member owns), and flips the
service's health with the reason:

* joining: no assignment for `join_after_s` since start or the last revocation;
* stalled: its partitions have records it has not read, it is not throttled, and it handled nothing
  for `stall_after_s` (records it read and holds, such as a partial batch, are not lag);
* stuck: the loop has not completed a step for `stall_after_s` (a handler that never returns);
* broker unreachable for `broker_down_after_s`.

A member that owned partitions and has waited `join_after_s` for them again, with the broker
answering, is not left to a supervisor: `rejoin_due` tells the loop to start a new consumer (the
client's state is what is wedged; seen once in a make test, the rollout's librdkafka consumer
still without an assignment 260 s after a broker restart). A supervisor's restart stays the backstop.

The watchdog uses its own Kafka clients (the consumer is not thread-safe) and never touches the
consumer's state; the loop only writes a few numbers under a lock.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.structs import TopicPartition
from prometheus_client import Counter, Gauge
from pydantic import BaseModel, Field

from m1flow.security.config import kafka_python as kafka_security

log = logging.getLogger(__name__)
HEALTHY = Gauge("m1flow_consumer_healthy", "1 while the consumer makes progress or has nothing to do", ["group"])
LAG = Gauge("m1flow_consumer_lag", "records behind on the partitions this member owns", ["group"])
REJOINS = Counter("m1flow_consumer_rejoins_total", "new consumers started after waiting too long for an assignment",
                  ["group"])
IDLE = Gauge("m1flow_consumer_seconds_since_progress", "seconds since the last handled record", ["group"])


class LivenessConfig(BaseModel):
    check_every_s: float = Field(5.0, gt=0, description="how often the watchdog looks")
    join_after_s: float = Field(90.0, gt=0, description="unhealthy after this long without an assignment")
    stall_after_s: float = Field(180.0, gt=0, description="unhealthy after this long without progress on lag")
    broker_down_after_s: float = Field(30.0, gt=0, description="unhealthy after the broker is away this long")


@dataclass
class Health:
    healthy: bool
    reason: str


class Liveness:
    """What the loop reports (thread-safe setters) and the watchdog thread that judges it."""

    def __init__(self, bootstrap: str, group_id: str, config: LivenessConfig,
                 on_change: Callable[[Health], None] = lambda h: None, assigned_mode: bool = False,
                 member: str | None = None) -> None:
        """member: this consumer's static member id (group.instance.id), by which the broker's view
        of the group can tell a member that owns nothing apart from one still joining."""
        self.bootstrap, self.group_id, self.config, self.on_change = bootstrap, group_id, config, on_change
        self.member = member
        self._lock = threading.Lock()
        now = time.monotonic()
        self._handled, self._progress_at, self._step_at = 0, now, now
        self._owned: set[tuple[str, int]] | None = set() if assigned_mode else None  # None: not assigned yet
        self._waiting_since: float | None = None if assigned_mode else now
        self._throttled = False
        self._read: dict[tuple[str, int], int] = {}  # next offset to read, per partition, as the loop saw it
        self._broker_ok_at = now
        self._was_owner = assigned_mode  # a rejoin is only for a member that lost what it owned
        self.rejoins, self._rejoined_at = 0, 0.0
        self.health = Health(False, "joining the consumer group")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ what the loop reports
    def handled(self, n: int) -> None:
        if n:
            with self._lock:
                self._handled += n
                self._progress_at = time.monotonic()

    def stepped(self, read: dict[tuple[str, int], int] | None = None) -> None:
        """A step completed; `read`: the next offset to read per partition, as far as handled."""
        with self._lock:
            self._step_at = time.monotonic()
            if read is not None:
                self._read = dict(read)

    def assigned(self, partitions: set[tuple[str, int]]) -> None:
        with self._lock:
            self._owned, self._waiting_since = set(partitions), None
            self._was_owner = True
            self._progress_at = time.monotonic()  # a new owner gets a full stall window

    def owns(self, partitions: set[tuple[str, int]]) -> None:
        """What the client says this member owns now (each step): a non-empty assignment means
        joined, whether or not an assignment callback said so (cooperative rounds may not)."""
        if partitions:
            with self._lock:
                if self._owned != partitions:
                    self._owned, self._waiting_since = set(partitions), None
                self._was_owner = True

    def revoked(self, partitions: set[tuple[str, int]] | None = None) -> None:
        """Cooperative rebalancing revokes only what moves: a replica keeping partitions is still an
        owner (kafka-python calls no on_partitions_assigned when nothing is added). It waits for an
        assignment only once it owns nothing (or when the revoked set is not known)."""
        with self._lock:
            kept = self._owned - partitions if self._owned is not None and partitions is not None else set()
            if kept:
                self._owned = kept
            else:
                self._owned, self._waiting_since = None, time.monotonic()

    def rejoin_due(self, now: float | None = None) -> bool:
        """True (once per `join_after_s`) when this member lost its partitions, has waited that long
        for an assignment, and the broker answers: the loop should start a new consumer."""
        now = time.monotonic() if now is None else now
        with self._lock:
            waiting = self._waiting_since
            if not self._was_owner or waiting is None:
                return False
            if now - max(waiting, self._rejoined_at) <= self.config.join_after_s:
                return False
            # the broker silent for two checks and a query's timeout: away, and a new client would wait too
            if now - self._broker_ok_at > 2 * self.config.check_every_s + 10:
                return False
            self._rejoined_at = now  # the next try after another full window
            self.rejoins += 1
        REJOINS.labels(self.group_id).inc()
        return True

    def throttled(self, value: bool) -> None:
        with self._lock:
            if self._throttled and not value:
                self._progress_at = time.monotonic()
            self._throttled = value

    # ------------------------------------------------------------ the watchdog
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="liveness", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        clients: tuple[KafkaConsumer, KafkaAdminClient] | None = None
        while not self._stop.wait(self.config.check_every_s):
            try:
                if clients is None:
                    clients = _clients(self.bootstrap, self.group_id)
                lag = self._lag(*clients)
                self._check_membership(clients[1])
                self._broker_ok_at = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - any failure to ask the broker counts as "away"
                log.debug("liveness: broker query failed: %r", exc)
                lag = None
                if clients is not None:
                    _close(clients)
                    clients = None
            self._judge(lag)
        if clients is not None:
            _close(clients)

    def _lag(self, consumer: KafkaConsumer, admin: KafkaAdminClient) -> int:
        with self._lock:
            owned = set(self._owned or ())
            read = dict(self._read)
        if not owned:
            return 0
        parts = [TopicPartition(t, p) for t, p in owned]
        ends = consumer.end_offsets(parts)
        committed = admin.list_group_offsets({self.group_id: parts}).get(self.group_id, {})
        behind = 0
        for tp in parts:
            meta = committed.get(tp)
            start = max(meta.offset if meta is not None and meta.offset >= 0 else 0, read.get((tp.topic, tp.partition), 0))
            behind += max(0, ends.get(tp, 0) - start)
        return behind

    def _check_membership(self, admin: KafkaAdminClient) -> None:
        """A member waiting for an assignment past join_after_s may simply own nothing (more
        replicas than partitions, or all of its partitions moved in a cooperative round): if the
        broker lists it in a Stable group with nothing assigned, it has joined, with nothing to do.
        Listed with partitions it does not know of, it is wedged (the broker's view and the client's
        differ: a static member's client that left the group without a LeaveGroup is listed so)."""
        with self._lock:
            waiting = self._waiting_since
        if self.member is None or waiting is None or time.monotonic() - waiting <= self.config.join_after_s:
            return
        group = admin.describe_groups([self.group_id]).get(self.group_id, {})
        mine = [m for m in group.get("members", []) if m.get("group_instance_id") == self.member]
        if group.get("group_state") == "Stable" and mine and not broker_assigned(mine[0]):
            with self._lock:
                if self._waiting_since is not None:
                    self._owned, self._waiting_since = set(), None

    def verdict(self, lag: int | None, now: float | None = None) -> Health:
        """The health that the reported numbers and the broker's lag (None: broker away) imply."""
        cfg, now = self.config, time.monotonic() if now is None else now
        with self._lock:
            waiting, progress_at, step_at = self._waiting_since, self._progress_at, self._step_at
            throttled, owned = self._throttled, self._owned
        if lag is None and now - self._broker_ok_at > cfg.broker_down_after_s:
            return Health(False, f"broker unreachable for {now - self._broker_ok_at:.0f}s")
        if waiting is not None and now - waiting > cfg.join_after_s:
            return Health(False, f"no partition assignment for {now - waiting:.0f}s (stuck joining the group?)")
        if owned is None:
            return Health(False, "joining the consumer group")
        if now - step_at > cfg.stall_after_s:
            return Health(False, f"loop stuck: no step completed for {now - step_at:.0f}s")
        if lag and not throttled and now - progress_at > cfg.stall_after_s:
            return Health(False, f"stalled: {lag} records behind and none handled for {now - progress_at:.0f}s")
        return Health(True, "ok")

    def _judge(self, lag: int | None) -> None:
        health = self.verdict(lag)
        now = time.monotonic()
        with self._lock:
            idle = now - self._progress_at
        HEALTHY.labels(self.group_id).set(1.0 if health.healthy else 0.0)
        IDLE.labels(self.group_id).set(idle)
        if lag is not None:
            LAG.labels(self.group_id).set(lag)
        if health.healthy != self.health.healthy or (not health.healthy and health.reason != self.health.reason):
            (log.info if health.healthy else log.warning)("liveness: %s", health.reason)
            self.health = health
            self.on_change(health)

    def mark_ready(self) -> None:
        """Judge once now, without asking the broker (at start-up, after the first assignment)."""
        health = self.verdict(0)
        if health.healthy and not self.health.healthy:
            self.health = health
            self.on_change(health)


def broker_assigned(member: dict) -> set[tuple[str, int]]:
    """The partitions a describe_groups member entry says the broker gave it (kafka-python decodes the
    consumer protocol's assignment; anything it could not decode counts as none)."""
    assignment = member.get("member_assignment")
    if not isinstance(assignment, dict):
        return set()
    parts = assignment.get("assigned_partitions") or ()
    return {(part["topic"], p) for part in parts for p in part.get("partitions", ())}


def _clients(bootstrap: str, group_id: str) -> tuple[KafkaConsumer, KafkaAdminClient]:
    consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             client_id=f"liveness-{group_id}", request_timeout_ms=10_000,
                             reconnect_backoff_max_ms=2000)
    try:
        admin = KafkaAdminClient(**kafka_security(), bootstrap_servers=bootstrap, client_id=f"liveness-{group_id}",
                                 request_timeout_ms=10_000)
    except Exception:
        consumer.close()
        raise
    return consumer, admin


def _close(clients: tuple[KafkaConsumer, KafkaAdminClient]) -> None:
    for client in clients:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closing a client of an unreachable broker
            pass
