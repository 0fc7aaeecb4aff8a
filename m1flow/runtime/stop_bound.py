"""Bound a graceful stop, so that a service leaves within its pod's (or container's) grace period.

On SIGTERM a service finishes or hands back its in-flight work, flushes and commits. With the broker
away that can wait for minutes (a flush retries, a commit waits for its coordinator); Kubernetes
then SIGKILLs the pod at `terminationGracePeriodSeconds` (30 s by default) and reports it as killed.
Leaving early loses nothing: what was not committed is consumed again from the committed offsets by
the next owner, and the learner's exactly-once record dedupes what was applied. So the stop is given
`stop_grace_s` (below the grace period the chart and compose give) and then the process exits itself.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
EXIT_CODE = 75  # EX_TEMPFAIL: stopped before its work was committed; the committed offsets replay it


class StopBound:
    """Armed by the stop signal; exits the process if it is still there `after_s` later (its thread is
    a daemon: a process that exits in time takes it along, hangs at interpreter exit included)."""

    def __init__(self, after_s: float, exit: Callable[[int], None] = os._exit) -> None:
        self.after_s = after_s
        self.exit = exit
        self._started = False

    def arm(self) -> None:
        """Start the clock (once: a second signal does not extend it). Called from signal handlers,
        which run on the main thread only: a flag, no lock (a nested handler would deadlock on one)."""
        if self.after_s <= 0 or self._started:
            return
        self._started = True
        threading.Thread(target=self._wait, name="stop-bound", daemon=True).start()

    def _wait(self) -> None:
        time.sleep(self.after_s)
        log.error("graceful stop not finished after %.0fs (broker away?): exiting; uncommitted work "
                  "is consumed again from the committed offsets", self.after_s)
        logging.shutdown()
        self.exit(EXIT_CODE)
