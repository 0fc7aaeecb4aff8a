"""How many runs go at once, and how many may wait: beyond that a call is refused at once.

Why refuse rather than queue without end: each waiting call holds a gRPC thread and its request
in memory; a caller told RESOURCE_EXHAUSTED can back off or try another replica, a caller left
waiting only finds out at its deadline. A waiting call whose caller gives up leaves the queue.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from svc_sandbox.backends.base import Cancel


class QueueFull(RuntimeError):
    """Every run slot is busy and the waiting line is full."""


class RunQueue:
    def __init__(self, max_running: int, max_waiting: int) -> None:
        self.max_running, self.max_waiting = max_running, max_waiting
        self.running = self.waiting = 0
        self._changed = threading.Condition()

    @contextmanager
    def slot(self, cancel: Cancel | None = None) -> Iterator[bool]:
        """Hold a run slot for the body; yields False when the caller gave up while waiting.

        Raises QueueFull when all slots are taken and `max_waiting` calls already wait.
        """
        with self._changed:
            if self.running >= self.max_running and self.waiting >= self.max_waiting:
                raise QueueFull(f"{self.running} runs going and {self.waiting} waiting; try again later")
            self.waiting += 1
            try:
                while self.running >= self.max_running and not (cancel is not None and cancel.is_set()):
                    self._changed.wait(Cancel.POLL_S)
            finally:
                self.waiting -= 1
            got = not (cancel is not None and cancel.is_set())
            self.running += got
        try:
            yield got
        finally:
            if got:
                with self._changed:
                    self.running -= 1
                    self._changed.notify()
