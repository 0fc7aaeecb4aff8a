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
