"""The policy versions the stage may evaluate: the records `policy` announced that the guard admitted
(checkpoint roots, the learner's signature over the whole record: m1flow.security.announcements,
checked by the service as each record arrives), loaded into the engine only when the checkpoint is
there with the announced weights.

A version may have several records (another URI or SHA-256 under the same number): each is a
candidate, tried newest first, so a record that fails to load does not hide the learner's genuine
record of the same number, whichever came first."""
from __future__ import annotations

from typing import Any

from m1flow import checkpoint
from m1flow.contracts import events


def weights_of(policy: events.PolicyVersion) -> tuple[int, str, str]:
    return policy.version, policy.checkpoint_uri, policy.sha256


class Versions:
    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.announced: dict[int, list[events.PolicyVersion]] = {}  # version -> its records, oldest first
        self.held: events.PolicyVersion | None = None  # the record whose weights the engine holds

    def add(self, policy: events.PolicyVersion) -> None:
        """An admitted announcement: a candidate of its version (a repeat of one replaces it)."""
        known = [p for p in self.announced.get(policy.version, []) if weights_of(p) != weights_of(policy)]
        self.announced[policy.version] = [*known, policy]

    def load(self, version: int) -> tuple[str, str] | None:
        """Make the engine hold `version`; None when it does, else (reason, why) no record of it loads
        (the newest record's reason)."""
        records = self.announced.get(version)
        if not records:
            return "unknown_version", f"v{version} was never announced on `policy`"
        if self.held is not None and any(weights_of(p) == weights_of(self.held) for p in records):
            return None  # held already (another set, or a command for the version just evaluated)
        first_failure = None
        for policy in reversed(records):
            failure = self._load(policy)
            if failure is None:
                return None
            first_failure = first_failure or failure
        return first_failure

    def _load(self, policy: events.PolicyVersion) -> tuple[str, str] | None:
        """Load one record's weights; None when the engine holds them, else (reason, why)."""
        try:
            directory = self.engine.policies.local(policy.checkpoint_uri)
            present = directory.is_dir() and checkpoint.has_weights(directory)
        except Exception as exc:  # noqa: BLE001 - a download or URI that fails: the checkpoint is not there
            return "missing", f"{policy.checkpoint_uri}: {exc!r}"
        if not present:
            return "missing", f"{policy.checkpoint_uri}: no weights there (rotated away?)"
        self.held = None  # a load that fails part-way leaves the engine holding nothing we can name
        try:
            self.engine.load(policy)
        except checkpoint.PolicyLoadError as exc:
            return ("checksum" if "checksum" in str(exc) else "unreadable"), str(exc)
        except Exception as exc:  # noqa: BLE001 - no checkpoint may stop the stage
            return "unreadable", repr(exc)
        self.held = policy
        return None
