"""Policy announcements authenticated end to end: signed by the learner, checked by every replica.

The broker's ACLs already let only the learner's principal write `policy`; the signature is the
second lock, for what the ACLs cannot see: a record replayed into the topic by an operator tool,
a mirror of the topic, or a broker or admin credential that was compromised. A replica adopts an
announcement only when (1) its checkpoint URI lies under a configured checkpoint root (a folder, or
an s3://bucket/prefix: m1flow.store.within), (2) the
learner's Ed25519 signature over (version, uri, sha256) verifies, and then, when loading, (3)
the weights' SHA-256 matches. A refused record is counted and logged and changes nothing.
"""
from __future__ import annotations

import logging
from pathlib import Path

from prometheus_client import Counter

from m1flow import store
from m1flow.contracts import events
from m1flow.security.config import SecurityConfig

log = logging.getLogger(__name__)
REFUSED = Counter("m1flow_policy_refused_total", "policy announcements refused", ["reason"])


class Refused(ValueError):
    """An announcement a replica must not act on; `reason` is the metric's label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def payload(policy: events.PolicyVersion) -> bytes:
    """What the signature covers: the version and where its weights are and what they hash to."""
    return f"m1flow-policy/v1\n{policy.version}\n{policy.checkpoint_uri}\n{policy.sha256}".encode()


def sign(policy: events.PolicyVersion, key_file: Path) -> events.PolicyVersion:
    """The announcement with its signature set (in place, and returned)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), None)
    policy.signature = key.sign(payload(policy))
    return policy


class Guard:
    """The checks a replica applies to every announcement before adopting it (none when the
    security block names no roots and no key: the laptop default, unchanged)."""

    def __init__(self, security: SecurityConfig) -> None:
        self.roots = [store.root_uri(r) for r in security.checkpoint_roots]
        self.public_key = None
        if security.policy_verify_key is not None:
            from cryptography.hazmat.primitives import serialization

            self.public_key = serialization.load_pem_public_key(Path(security.policy_verify_key).read_bytes())

    def check(self, policy: events.PolicyVersion) -> None:
        """Raise Refused unless the announcement may be acted on."""
        if self.roots:
            try:
                inside = store.within(policy.checkpoint_uri, self.roots)
            except Exception as exc:  # noqa: BLE001 - an unparseable URI is refused like a foreign one
                raise Refused("outside_roots", f"{policy.checkpoint_uri!r} is not a checkpoint URI ({exc})") from None
            if not inside:
                raise Refused("outside_roots", f"{policy.checkpoint_uri!r} is under none of "
                                               f"{', '.join(self.roots)}")
        if self.public_key is not None:
            from cryptography.exceptions import InvalidSignature

            if not policy.signature:
                raise Refused("unsigned", f"v{policy.version} carries no signature")
            try:
                self.public_key.verify(policy.signature, payload(policy))
            except InvalidSignature:
                raise Refused("bad_signature", f"v{policy.version}: not signed by the learner's key") from None

    def admits(self, policy: events.PolicyVersion) -> bool:
        """check() as a verdict: a refusal is counted and logged (never the signature bytes)."""
        try:
            self.check(policy)
            return True
        except Refused as exc:
            REFUSED.labels(exc.reason).inc()
            log.warning("refusing policy announcement v%s (%s): %s", policy.version, exc.reason, exc)
            return False
