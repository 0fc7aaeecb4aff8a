"""Exit a process whose consumer stays unhealthy, so that the container engine restarts it.

`m1flow up`'s supervisor restarts a service that stays unhealthy; Docker (compose) does not: a
health check only labels a container unhealthy, while its restart policy acts on exits alone. A
consume loop wedged after a broker outage would stay wedged forever. With `exit_unhealthy_after_s`
set (docker-compose.yml sets it), a process that was healthy once and has been unhealthy that long
exits at once (no graceful close: the loop may be the thing that is stuck; the guarantees already
hold for a crash), and `restart: unless-stopped` brings it back. A process never healthy (still
starting, or a replica beyond the partition count) is left alone: exiting would only loop.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from m1flow.bus.liveness import Health

log = logging.getLogger(__name__)
EXIT_CODE = 70  # EX_SOFTWARE: distinct from a kill (137) in `docker ps` and the supervisor's log


class StuckExit:
    """Watches a health verdict from its own thread; `check` is the decision, callable in tests."""

    def __init__(self, health: Callable[[], Health], after_s: float, exit: Callable[[int], None] = os._exit) -> None:
        self.health = health
        self.after_s = after_s
        self.exit = exit
        self.was_healthy = False
        self.unhealthy_since: float | None = None

    def check(self, now: float) -> bool:
        """True when the process must exit now."""
        verdict = self.health()
        if verdict.healthy:
            self.was_healthy, self.unhealthy_since = True, None
            return False
        if not self.was_healthy:
            return False
        if self.unhealthy_since is None:
            self.unhealthy_since = now
        return now - self.unhealthy_since >= self.after_s

    def start(self, every_s: float = 5.0) -> None:
        threading.Thread(target=self._run, args=(every_s,), name="stuck-exit", daemon=True).start()

    def _run(self, every_s: float) -> None:
        while True:
            time.sleep(every_s)
            if self.check(time.monotonic()):
                log.error("unhealthy for %.0fs (%s): exiting for a restart", self.after_s, self.health().reason)
                self.exit(EXIT_CODE)
                return
