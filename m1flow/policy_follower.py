"""Which policy an inference replica should hold, and loading it without ever dying of it.

A replica learns of policies from `policy` announcements. Loading one can fail for reasons that
are not the replica's fault and pass by themselves: the checkpoint was rotated away by the learner
before the replica got to it, the file system hiccuped, a copy is still arriving. Such a failure is
counted and logged, the replica keeps sampling with the policy it holds, and it tries again when a
newer version is announced or, for the same version, after a back-off. A replica that crashed
instead would come back, read the same announcement and crash again: the loop the rollout
service was once stuck in.

Every record of the newest few versions is a candidate (records of one number may name other
weights): the first announcement of a number does not win by coming first, so one that fails to load
(with the learner's key, a wrong SHA-256 once made replicas skip the genuine version) does not hide
the genuine record, before or after it; and a replica whose newest version does not load takes the
newest that does (after compaction, a restarting replica may find the newest genuine record gone).
"""
from __future__ import annotations

import logging
import time
from typing import Protocol

from prometheus_client import Counter, Gauge

from m1flow.contracts import events

log = logging.getLogger(__name__)
LOAD_FAILURES = Counter("m1flow_policy_load_failures_total", "policy versions that failed to load")
LOADED_VERSION = Gauge("m1flow_policy_version_loaded", "policy version this replica samples with")


class Loader(Protocol):
    version: int

    def load(self, policy: events.PolicyVersion) -> None: ...


def weights_of(policy: events.PolicyVersion) -> tuple[int, str, str]:
    """What an announcement names: (version, URI, SHA-256). Two records of one version may differ."""
    return policy.version, policy.checkpoint_uri, policy.sha256


class PolicyFollower:
    """The admitted records of the newest few announced versions; the caller passes only
    announcements its check admitted (m1flow.bus.control.ControlFollower)."""

    def __init__(self, retry_s: float = 5.0, keep_versions: int = 4) -> None:
        self.retry_s = retry_s
        self.keep_versions = keep_versions  # a learner keeps 3 checkpoints: older ones are gone anyway
        self.records: dict[int, list[events.PolicyVersion]] = {}  # version -> its records, oldest first
        self.failed_at: dict[tuple[int, str, str], float] = {}  # weights_of -> when it last failed to load
        self.failures = 0

    @property
    def wanted(self) -> events.PolicyVersion | None:
        """The newest record of the newest announced version (None before any)."""
        return self.records[max(self.records)][-1] if self.records else None

    def announce(self, policy: events.PolicyVersion) -> None:
        """Take an admitted announcement. Another record of a version it holds (other weights) joins
        that version's, so one that fails to load never hides the learner's genuine record of the
        same number, whichever came first."""
        same = [r for r in self.records.get(policy.version, []) if weights_of(r) != weights_of(policy)]
        self.records[policy.version] = [*same, policy]
        for old in sorted(self.records)[:-self.keep_versions]:
            del self.records[old]

    def _ready(self, policy: events.PolicyVersion) -> bool:
        last = self.failed_at.get(weights_of(policy))
        return last is None or time.monotonic() - last >= self.retry_s

    def _to_try(self, version: int) -> list[events.PolicyVersion]:
        """The records newer than `version` that may be tried now: newest version first, and within
        a version the newest record first."""
        return [r for v in sorted(self.records, reverse=True) if v > version
                for r in reversed(self.records[v]) if self._ready(r)]

    def due(self, version: int) -> bool:
        """Whether a replica holding `version` should load now: a record of a newer version did not
        fail to load less than retry_s ago."""
        return bool(self._to_try(version))

    def load_if_due(self, engine: Loader) -> bool:
        """Load the newest version that loads (see `_to_try`); True when one did. A replica that
        holds nothing after a restart thus starts on the newest admitted announcement it can load,
        even when the newest one cannot be."""
        for policy in self._to_try(engine.version):
            try:
                engine.load(policy)
            except Exception as exc:  # noqa: BLE001 - no load failure may stop sampling
                self.failures += 1
                self.failed_at[weights_of(policy)] = time.monotonic()
                LOAD_FAILURES.inc()
                log.warning("policy v%s (%s) failed to load, keeping v%s: %r", policy.version,
                            policy.checkpoint_uri, engine.version, exc)
                continue
            self.failed_at = {k: t for k, t in self.failed_at.items() if k[0] > engine.version}
            LOADED_VERSION.set(engine.version)
            return True
        return False
