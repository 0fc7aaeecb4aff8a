"""Which policy an inference replica should hold, and loading it without ever dying of it.

A replica learns of policies from `policy` announcements. Loading one can fail for reasons that
are not the replica's fault and pass by themselves: the checkpoint was rotated away by the learner
before the replica got to it, the file system hiccuped, a copy is still arriving. Such a failure is
counted and logged, the replica keeps sampling with the policy it holds, and it tries again when a
newer version is announced or, for the same version, after a back-off. A replica that crashed
instead would come back, read the same announcement and crash again: the loop the rollout
service was once stuck in.
"""
from __future__ import annotations

import logging
import time
from typing import Protocol

from prometheus_client import Counter, Gauge

from m1flow.contracts import events
from m1flow.security.announcements import Guard

log = logging.getLogger(__name__)
LOAD_FAILURES = Counter("m1flow_policy_load_failures_total", "policy versions that failed to load")
LOADED_VERSION = Gauge("m1flow_policy_version_loaded", "policy version this replica samples with")


class Loader(Protocol):
    version: int

    def load(self, policy: events.PolicyVersion) -> None: ...


class PolicyFollower:
    def __init__(self, retry_s: float = 5.0, guard: Guard | None = None) -> None:
        self.retry_s = retry_s
        self.guard = guard
        self.wanted: events.PolicyVersion | None = None
        self.failed_at: dict[int, float] = {}  # version -> when it last failed to load
        self.failures = 0

    def announce(self, policy: events.PolicyVersion, trusted: bool = False) -> None:
        """Take an announcement as the wanted policy if it is newer and the guard admits it (a
        refused one, from outside the checkpoint roots or not signed by the learner, is counted).
        trusted: the process's own configuration named it (a replay's pinned policy), not a record."""
        if not trusted and self.guard is not None and not self.guard.admits(policy):
            return
        if self.wanted is None or policy.version > self.wanted.version:
            self.wanted = policy

    def due(self, version: int) -> bool:
        """Whether a replica holding `version` should load the newest announced policy now (it is
        newer, and not a version that failed to load less than retry_s ago)."""
        policy = self.wanted
        if policy is None or policy.version <= version:
            return False
        last = self.failed_at.get(policy.version)
        return last is None or time.monotonic() - last >= self.retry_s

    def load_if_due(self, engine: Loader) -> bool:
        """Load the newest announced policy if it is due (see `due`); True when it loaded."""
        if not self.due(engine.version):
            return False
        policy = self.wanted
        try:
            engine.load(policy)
        except Exception as exc:  # noqa: BLE001 - no load failure may stop sampling
            self.failures += 1
            self.failed_at[policy.version] = time.monotonic()
            LOAD_FAILURES.inc()
            log.warning("policy v%s (%s) failed to load, keeping v%s: %r", policy.version,
                        policy.checkpoint_uri, engine.version, exc)
            return False
        self.failed_at.clear()
        LOADED_VERSION.set(engine.version)
        return True
