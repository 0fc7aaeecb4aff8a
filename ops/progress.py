"""A progress line every few seconds for work over many rows (`m1flow data validate`, `data profile`).

Why: checking a gold takes milliseconds to seconds, so 100k rows is many minutes; without a line now
and then a long run cannot be told from a wedged one. Lines are at most `every_s` apart (0: at
every step, for tests), and say how far, how fast and about how long is left.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Progress:
    """`step(done)` says `<what>: done/total rows, ...` when `every_s` has passed since the last line."""

    def __init__(self, what: str, total: int | None, every_s: float = 10.0,
                 say: Callable[[str], None] = stderr_line) -> None:
        self.what, self.total, self.every_s, self.say = what, total, every_s, say
        self.started = self.said_at = time.monotonic()
        self.lines = 0

    def step(self, done: int, note: str = "") -> None:
        """The count so far; a line when one is due. note: what else to say (`3 bad`)."""
        now = time.monotonic()
        if now - self.said_at < self.every_s:
            return
        self.said_at = now
        self.lines += 1
        self.say(self.line(done, now - self.started, note))

    def line(self, done: int, elapsed: float, note: str = "") -> str:
        rate = done / elapsed if elapsed > 0 else 0.0
        of = f"/{self.total}" if self.total is not None else ""
        text = f"{self.what}: {done}{of} rows" + (f", {note}" if note else "") + f", {rate:.0f} rows/s"
        if self.total is not None and rate > 0 and done < self.total:
            text += f", about {_duration((self.total - done) / rate)} left"
        return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


__all__ = ["Progress", "stderr_line"]
