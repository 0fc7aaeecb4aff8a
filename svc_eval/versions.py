"""The policy versions the stage may evaluate: those `policy` announced, loaded into the engine only
when the announcement passes the checks svc_rollout makes (checkpoint roots, the learner's signature)
and the checkpoint is there with the announced weights."""
from __future__ import annotations

from typing import Any

from m1flow import checkpoint
from m1flow.contracts import events
from m1flow.security.announcements import Guard, Refused


class Versions:
    def __init__(self, engine: Any, guard: Guard) -> None:
        self.engine = engine
        self.guard = guard
        self.announced: dict[int, events.PolicyVersion] = {}
        self.loaded: tuple[int, str, str] | None = None  # (version, uri, sha256) the engine holds

    def load(self, version: int) -> tuple[str, str] | None:
        """Make the engine hold `version`; None when it does, else (reason, why) it cannot."""
        policy = self.announced.get(version)
        if policy is None:
            return "unknown_version", f"v{version} was never announced on `policy`"
        try:
            self.guard.check(policy)
        except Refused as exc:
            return "refused", str(exc)
        if self.loaded == (policy.version, policy.checkpoint_uri, policy.sha256):
            return None  # held already (another set, or a command for the version just evaluated)
        try:
            directory = self.engine.policies.local(policy.checkpoint_uri)
            present = directory.is_dir() and checkpoint.has_weights(directory)
        except Exception as exc:  # noqa: BLE001 - a download or URI that fails: the checkpoint is not there
            return "missing", f"{policy.checkpoint_uri}: {exc!r}"
        if not present:
            return "missing", f"{policy.checkpoint_uri}: no weights there (rotated away?)"
        self.loaded = None  # a load that fails part-way leaves the engine holding nothing we can name
        try:
            self.engine.load(policy)
        except checkpoint.PolicyLoadError as exc:
            return ("checksum" if "checksum" in str(exc) else "unreadable"), str(exc)
        except Exception as exc:  # noqa: BLE001 - no checkpoint may stop the stage
            return "unreadable", repr(exc)
        self.loaded = (policy.version, policy.checkpoint_uri, policy.sha256)
        return None
