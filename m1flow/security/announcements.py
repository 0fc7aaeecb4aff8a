"""Policy announcements authenticated end to end: signed by the learner, checked by every consumer.

The broker's ACLs already let only the learner's principal write `policy`; the signature is the
second lock, for what the ACLs cannot see: a record replayed into the topic by an operator tool,
a mirror of the topic, or a broker or admin credential that was compromised.

Sign what is used, use only what is admitted. The learner signs the whole `PolicyVersion`: its
deterministic serialization with the signature field empty (`payload`), so every field a consumer
acts on is covered (the version, the URI and the SHA-256 a replica loads, the `batch_groups` and
`stats` the rollout's backpressure and the source's lead are sized by, the header's run id that svc_eval
filters on), and a field added to the message later is covered without touching this module. A
consumer verifies its own serialization of what it parsed, so a field it does not know (a newer
producer's) is covered too: nothing it holds escapes the signature.

Every consumer of `policy` (svc_rollout and svc_source through m1flow.bus.control.ControlFollower,
svc_monitor's handler, svc_eval's) calls `Guard.admits` on each record before anything else reads
it: the URI must lie under a configured checkpoint root (a folder, or an s3://bucket/prefix:
m1flow.uris.within) and the learner's Ed25519 signature over `payload` must verify; the weights'
SHA-256 is checked when loading. A refused record is counted on the consumer's /metrics
(`m1flow_policy_refused_total{reason}`, the same counter in every process) and logged, and changes
nothing: no lead, no backpressure, no stored version, no evaluation job.
"""
from __future__ import annotations

import logging
from pathlib import Path

from prometheus_client import Counter

from m1flow import uris
from m1flow.contracts import events
from m1flow.security.config import SecurityConfig

log = logging.getLogger(__name__)
REFUSED = Counter("m1flow_policy_refused_total", "policy announcements refused (not acted on)", ["reason"])
REASONS = ("outside_roots", "unsigned", "bad_signature")
for _reason in REASONS:  # on /metrics at 0 from the start, so a dashboard or alert sees the series
    REFUSED.labels(_reason)
DOMAIN = b"m1flow-policy/v2\n"  # v1 signed (version, uri, sha256) only: such a record is refused now


class Refused(ValueError):
    """An announcement a consumer must not act on; `reason` is the metric's label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def payload(policy: events.PolicyVersion) -> bytes:
    """What the signature covers: the whole record but its signature, serialized deterministically
    (fields by number, map entries by key), so signer and verifier make the same bytes."""
    unsigned = events.PolicyVersion()
    unsigned.CopyFrom(policy)
    unsigned.ClearField("signature")
    return DOMAIN + unsigned.SerializeToString(deterministic=True)


def sign(policy: events.PolicyVersion, key_file: Path) -> events.PolicyVersion:
    """The announcement with its signature set (in place, and returned). Sign last: a field set
    after this invalidates the signature."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), None)
    policy.signature = key.sign(payload(policy))
    return policy


def verify_key(path: Path):  # noqa: ANN201 - an Ed25519PublicKey
    """The learner's public key from a PEM public key (`m1flow up --secure`) or from a certificate
    that carries it (the chart: Helm can make a key and a self-signed certificate, not a bare public key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    pem = path.read_bytes()
    key = (x509.load_pem_x509_certificate(pem).public_key() if b"-----BEGIN CERTIFICATE-----" in pem
           else serialization.load_pem_public_key(pem))
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"security.policy_verify_key: {path} holds a {type(key).__name__}, not an Ed25519 key")
    return key


class Guard:
    """The checks a consumer applies to every announcement before acting on it (none when the
    security block names no roots and no key: the laptop default, unchanged)."""

    def __init__(self, security: SecurityConfig) -> None:
        self.roots = [uris.root_uri(r) for r in security.checkpoint_roots]
        self.public_key = None
        if security.policy_verify_key is not None:
            self.public_key = verify_key(Path(security.policy_verify_key))

    def check(self, policy: events.PolicyVersion) -> None:
        """Raise Refused unless the announcement may be acted on."""
        if self.roots:
            try:
                inside = uris.within(policy.checkpoint_uri, self.roots)
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
                raise Refused("bad_signature", f"v{policy.version}: not signed by the learner's key, "
                                               "or changed since") from None

    def admits(self, policy: events.PolicyVersion, count: bool = True) -> bool:
        """check() as a verdict, the one every consumer of `policy` asks before acting on a record:
        a refusal is counted and logged (never the signature bytes). count=False: a record this
        process reads twice (svc_eval's history, then its consumer group) is counted once."""
        try:
            self.check(policy)
            return True
        except Refused as exc:
            if not count:
                return False
            REFUSED.labels(exc.reason).inc()
            log.warning("refusing policy announcement v%s (%s): %s", policy.version, exc.reason, exc)
            return False
