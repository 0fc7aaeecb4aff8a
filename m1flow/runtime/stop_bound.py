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
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)
EXIT_CODE = 75  # EX_TEMPFAIL: stopped before its work was committed; the committed offsets replay it
LOG_GRACE_S = 1.0


class StopBound:
    """Armed by the stop signal; exits the process if it is still there `after_s` later (its thread is
    a daemon: a process that exits in time takes it along, hangs at interpreter exit included)."""

    def __init__(self, after_s: float, exit: Callable[[int], None] = os._exit) -> None:
        self.after_s = after_s
        self.exit = exit
        self._started = False

    def install(self, on_stop: Callable[[], None],
                signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """Take the stop signals: each calls `on_stop` and arms the bound. Python runs a signal's handler
        on the main thread between two bytecodes, so a main thread blocked in a C call (librdkafka's
        synchronous commit or flush, with the broker away) would hold the handler, and the clock, back
        for as long as the call lasts. The C-level handler also writes the signal's number to a wakeup
        socket; a thread of its own reads it and acts at once. Call from the main thread."""
        wanted = {int(s) for s in signals}
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._sockets = (reader, writer)  # kept open for the life of the process
        # a forked child shares the socket: its own SIGTERM must not stop this process
        os.register_at_fork(after_in_child=self._forget_in_child)
        for sig in wanted:  # a Python handler must be set for the C one to be: the reader does the work
            signal.signal(sig, lambda *_: on_stop())
        threading.Thread(target=self._read, args=(reader, wanted, on_stop), name="stop-signals",
                         daemon=True).start()

    def _forget_in_child(self) -> None:
        signal.set_wakeup_fd(-1)
        for sock in self._sockets:
            sock.close()

    def _read(self, reader: socket.socket, wanted: set[int], on_stop: Callable[[], None]) -> None:
        while data := reader.recv(64):
            if wanted.intersection(data):
                on_stop()
                self.arm()

    def arm(self) -> None:
        """Start the clock (once: a second signal does not extend it). Called from the signal reader's
        thread only, so a flag needs no lock."""
        if self.after_s <= 0 or self._started:
            return
        self._started = True
        threading.Thread(target=self._wait, name="stop-bound", daemon=True).start()

    def _wait(self) -> None:
        time.sleep(self.after_s)
        # Saying why takes a logging handler's lock, which a thread stuck mid-write may hold: the
        # exit does not wait on it longer than LOG_GRACE_S (each handler flushes as it writes).
        said = threading.Thread(target=self._say, name="stop-bound-log", daemon=True)
        said.start()
        said.join(LOG_GRACE_S)
        self.exit(EXIT_CODE)

    def _say(self) -> None:
        log.error("graceful stop not finished after %gs (broker away?): exiting; uncommitted work "
                  "is consumed again from the committed offsets", self.after_s)
