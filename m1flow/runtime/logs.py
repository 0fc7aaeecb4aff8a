"""Structured logs: one JSON object per line, carrying the service name and the current trace ids."""
from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from contextlib import contextmanager
from typing import Iterator

_trace: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("m1flow_trace", default={})


@contextmanager
def trace(**ids: object) -> Iterator[None]:
    """Attach trace ids (run_id, group_id, rollout_id, policy_version) to logs inside the block."""
    token = _trace.set({**_trace.get(), **{k: str(v) for k, v in ids.items() if v not in (None, "")}})
    try:
        yield
    finally:
        _trace.reset(token)


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str, replica: int) -> None:
        super().__init__()
        self.service = service
        self.replica = replica

    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": round(time.time(), 3), "level": record.levelname, "service": self.service,
                 "replica": self.replica, "logger": record.name, "msg": record.getMessage(),
                 **_trace.get()}
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class RepeatFilter(logging.Filter):
    """Lets the first of a run of like messages through, then one summary per `every_s` seconds.

    During a broker outage every Kafka client logs a connection error per reconnect attempt;
    a few dozen lines a second would bury the one line that matters."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._last: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = f"{record.name}:{record.levelno}:{str(record.msg)[:40]}"
        now = time.monotonic()
        last, suppressed = self._last.get(key, (-self.every_s, 0))
        if now - last < self.every_s:
            self._last[key] = (last, suppressed + 1)
            return False
        if suppressed:
            record.msg = f"{record.msg} ({suppressed} like messages in the last {now - last:.0f}s suppressed)"
        self._last[key] = (now, 0)
        return True


def setup(service: str, replica: int = 0, level: str = "INFO", json_lines: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter(service, replica))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {service}[{replica}] %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("kafka", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    handler.addFilter(_KafkaRepeats())


class _KafkaRepeats(RepeatFilter):
    """RepeatFilter for the Kafka client's records only; everything else passes untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith("kafka") or super().filter(record)
