"""Follow small state topics (`policy`, `control`) from their beginning without joining a group.

Every replica must see every policy announcement and control command, so these are read by
assignment, not by a group that would split partitions between replicas. Replaying the whole
topic on start rebuilds the current state (the newest policy, the current window, paused or not);
`catch_up` reads up to the end the topic had when it was called, however many polls that takes,
so the state is the newest one and not whatever the first poll happened to return.

Why through `clients.Consumer` (librdkafka by default): a rollout replica polls its watcher between
every engine step. kafka-python does its fetching in Python, on the caller's thread and its own
network thread: py-spy put the watcher at 40-50% of svc_rollout's CPU in `bench/pipeline.py`,
where librdkafka fetches in C threads and a poll that finds nothing costs microseconds. The group
id is never joined and nothing is committed under it: librdkafka requires one, and under ACLs it is
the service's own group, which the service may describe (docs/security.md).
"""
from __future__ import annotations

import logging
import time

from google.protobuf.message import Message

from m1flow.bus import codec
from m1flow.bus.clients import TP, Client, ClientError, Settings, consumer
from m1flow.bus.topics import TopicSpec
from m1flow.security.config import SecurityConfig

log = logging.getLogger(__name__)


class WatchError(ClientError):
    """A poll that failed in the client (broker away, a transport error); the next poll reads on."""


class TopicWatcher:
    def __init__(self, bootstrap: str, topics: tuple[TopicSpec, ...], client_id: str,
                 security: SecurityConfig | None = None, group_id: str | None = None,
                 client: Client = "confluent-kafka") -> None:
        self.specs = {t.name: t for t in topics}
        self.consumer = consumer(client, Settings(
            bootstrap=bootstrap, group_id=group_id or f"{client_id}-unjoined", client_id=client_id,
            group_instance_id=None, session_timeout_ms=45_000, max_poll_interval_ms=3_600_000,
            max_poll_records=500, security=security))
        self.parts: list[TP] = [(spec.name, p) for spec in topics
                                for p in sorted(self.consumer.partitions_for_topic(spec.name)
                                                or range(spec.partitions))]
        self.consumer.assign({tp: None for tp in self.parts})
        self._next: dict[TP, int] = {}  # the offset after the last record read, per partition

    def poll(self, timeout_ms: int = 0) -> list[Message]:
        """Messages that arrived since the last poll, each partition's in the broker's order (its
        offsets); undecodable ones are logged and skipped.

        Never re-sorted by anything a sender wrote: ordering by the header's `created_unix_ms` (as
        before) let whoever wrote a record place it before or after the others (a `policy` record
        stamped in the future was applied last, whatever came after it). Offsets are the broker's.
        Across topics there is no order to keep: what `policy` and `control` set is independent
        (m1flow.bus.control)."""
        out: list[Message] = []
        try:
            fetched = self.consumer.poll(timeout_ms, 500)
        except ClientError as exc:  # what both consumers' poll raise for a failed round trip
            raise WatchError(f"polling {', '.join(self.specs)}: {exc}") from exc
        for (topic, partition), records in fetched.items():
            for rec in records:
                self._next[(topic, partition)] = rec.offset + 1
                try:
                    out.append(codec.decode(rec.value, self.specs[topic].value_type))
                except codec.CodecError as exc:
                    log.warning("skipping undecodable %s/%s@%s: %s", topic, partition, rec.offset, exc)
        return out

    def catch_up(self, timeout_s: float = 60.0) -> list[Message]:
        """Everything up to the topics' current end, oldest first (the whole history on a first call).

        Raises TimeoutError if the end is not reached in time (broker away): the caller decides
        whether to wait longer; returning a partial history would pick a stale state.
        """
        deadline = time.monotonic() + timeout_s
        ends = self._ends(deadline, timeout_s)
        out: list[Message] = []
        while behind := self._behind(ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"state topics not read to their end within {timeout_s:.0f}s: {behind}")
            out += self.poll(timeout_ms=200)
        return out

    def _ends(self, deadline: float, timeout_s: float) -> dict[TP, int]:
        """The end of each partition that has records (an empty one is read by definition)."""
        while True:
            try:
                return {tp: end for tp, (begin, end) in self.consumer.watermarks(set(self.parts)).items()
                        if end > begin}
            except ClientError as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"state topics' ends unknown within {timeout_s:.0f}s: {exc}") from exc
                time.sleep(0.5)

    def _behind(self, ends: dict[TP, int]) -> dict[str, int]:
        """Records left to read per partition. The last record of a partition is its end - 1 even
        when compacted (compaction keeps the newest record of each key) and no producer of these
        topics is transactional (no trailing markers), so the last offset read is the measure."""
        return {f"{t}/{p}": end - self._next.get((t, p), 0) for (t, p), end in ends.items()
                if self._next.get((t, p), 0) < end}

    def close(self) -> None:
        self.consumer.close()
