"""A consumed record, independent of the client library, so handlers never see kafka-python types."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int

    @property
    def position(self) -> str:
        """topic/partition@offset: how logs and ScoredGroup.source_offsets name a record."""
        return f"{self.topic}/{self.partition}@{self.offset}"
