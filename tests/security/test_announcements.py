"""Forged `policy` records change no rollout's weights: a record naming a path outside the
checkpoint roots, one whose hash the weights do not match, and one not signed by the learner's key
(unsigned, another key, or the learner's signature moved onto another path) are refused and
counted; only the learner's own announcement loads. The engine's real load path runs (URI, root,
signature, checksum); only its model loading is a recorder.

The check (Guard.admits, the one every consumer of `policy` asks) covers the whole record: any
field changed after signing, a field the reader does not know included, is refused. A record of a
version that fails to load does not hide the genuine record of the same number, in a replica
(PolicyFollower) or in svc_eval (Versions), whichever came first."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from m1flow import checkpoint
from m1flow.checkpoint import uri_for
from m1flow.contracts import events
from m1flow.policy_follower import PolicyFollower
from m1flow.bus import codec
from m1flow.security.announcements import REFUSED, Guard, Refused, sign
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import signing_key
from m1flow.engines.base import Engine
from svc_eval.versions import Versions


class RecordingEngine(Engine):
    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[Path] = []

    def _load(self, directory) -> None:  # noqa: ANN001
        self.loaded.append(Path(directory))

    def submit(self, request) -> None: ...  # noqa: ANN001
    def step(self) -> list: return []
    def abort(self, keys) -> None: ...  # noqa: ANN001
    def in_flight(self) -> int: return 0
    def sequences_in_flight(self) -> int: return 0


def weights(directory: Path, seed: int) -> str:
    directory.mkdir(parents=True)
    (directory / checkpoint.WEIGHTS_FILE).write_bytes(os.urandom(64) + bytes([seed]))
    return checkpoint.weights_sha256(directory)


@pytest.fixture
def run(tmp_path: Path):
    root = tmp_path / "run"
    signing, public = signing_key(tmp_path / "secrets", "learner")
    guard = Guard(SecurityConfig(checkpoint_roots=[root], policy_verify_key=public))
    return root, signing, guard


def announce(follower: PolicyFollower, engine: RecordingEngine, policy: events.PolicyVersion,
             guard: Guard | None = None) -> bool:
    """What a replica does with a record: the guard's check first (svc_rollout's ControlFollower), then load."""
    if guard is None or guard.admits(policy):
        follower.announce(policy)
    return follower.load_if_due(engine)


def refused(reason: str) -> float:
    return REFUSED.labels(reason)._value.get()


def test_only_the_learners_announcement_from_a_root_loads(run, tmp_path: Path) -> None:
    root, signing, guard = run
    follower, engine = PolicyFollower(retry_s=0), RecordingEngine()
    good = root / "learner" / "checkpoints" / "v000001"
    sha = weights(good, 1)
    real = sign(events.PolicyVersion(version=1, checkpoint_uri=uri_for(good), sha256=sha), signing)

    outside = tmp_path / "elsewhere" / "v000002"
    before = refused("outside_roots")
    forged = sign(events.PolicyVersion(version=2, checkpoint_uri=uri_for(outside), sha256=weights(outside, 2)), signing)
    assert not announce(follower, engine, forged, guard)  # even the learner's key cannot point outside the roots
    traversal = events.PolicyVersion(version=2, checkpoint_uri=str(root / ".." / "elsewhere" / "v000002"), sha256=forged.sha256)
    assert not announce(follower, engine, sign(traversal, signing), guard)
    assert refused("outside_roots") == before + 2

    other = root / "learner" / "checkpoints" / "v000003"
    other_sha = weights(other, 3)
    before = refused("unsigned")
    unsigned = events.PolicyVersion(version=3, checkpoint_uri=uri_for(other), sha256=other_sha)
    assert not announce(follower, engine, unsigned, guard)
    assert refused("unsigned") == before + 1

    stranger = tmp_path / "stranger.key"
    stranger.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    before = refused("bad_signature")
    assert not announce(follower, engine, sign(events.PolicyVersion(version=3, checkpoint_uri=uri_for(other),
                                                                     sha256=other_sha), stranger), guard)
    moved = events.PolicyVersion(version=3, checkpoint_uri=uri_for(other), sha256=other_sha, signature=real.signature)
    assert not announce(follower, engine, moved, guard)  # the learner's signature of v1, on another record
    assert refused("bad_signature") == before + 2
    assert engine.loaded == [] and engine.version == -1 and follower.wanted is None

    wrong_hash = sign(events.PolicyVersion(version=4, checkpoint_uri=uri_for(other), sha256="0" * 64), signing)
    assert not announce(follower, engine, wrong_hash, guard)  # signed and in a root, but not these weights
    assert engine.loaded == [] and follower.failures == 1

    newest = root / "learner" / "checkpoints" / "v000005"
    assert announce(follower, engine, sign(events.PolicyVersion(version=5, checkpoint_uri=uri_for(newest),
                                                                 sha256=weights(newest, 5)), signing), guard)
    assert engine.loaded == [newest] and engine.version == 5


def test_without_roots_or_key_every_announcement_is_admitted_as_before(tmp_path: Path) -> None:
    follower, engine = PolicyFollower(retry_s=0), RecordingEngine()
    anywhere = tmp_path / "v000001"
    assert announce(follower, engine, events.PolicyVersion(version=1, checkpoint_uri=uri_for(anywhere),
                                                           sha256=weights(anywhere, 1)), Guard(SecurityConfig()))
    assert engine.loaded == [anywhere]


def signed_record(root: Path, signing: Path) -> events.PolicyVersion:
    """A record with every field set, as the learner announces it, signed."""
    directory = root / "learner" / "checkpoints" / "v000007"
    policy = events.PolicyVersion(header=codec.header("learner", run_id="run-a", policy_version=7, message_id="m7"),
                                  version=7, checkpoint_uri=uri_for(directory), sha256="a" * 64, step=7,
                                  stats={"loss": 0.5, "consumed_groups": 9.0}, batch_groups=8,
                                  input_offsets={"scored/0": 40, "scored/1": 38})
    return sign(policy, signing)


# every field a consumer may act on, changed after signing (one at a time)
CHANGES = {
    "version": lambda p: setattr(p, "version", 1_000_030),
    "checkpoint_uri": lambda p: setattr(p, "checkpoint_uri", p.checkpoint_uri.replace("v000007", "v000008")),
    "sha256": lambda p: setattr(p, "sha256", "b" * 64),
    "step": lambda p: setattr(p, "step", 8),
    "stats": lambda p: p.stats.__setitem__("consumed_groups", 1e6),
    "batch_groups": lambda p: setattr(p, "batch_groups", 1_000_000),
    "input_offsets": lambda p: p.input_offsets.__setitem__("scored/0", 1_000_000),  # would open backpressure
    "header": lambda p: setattr(p.header.trace, "run_id", "run-b"),
}


def test_every_field_is_covered_by_the_signature() -> None:
    """The table above names every field of PolicyVersion but the signature: a field added to the
    contract fails here until it is listed (and, being serialized, it is signed already)."""
    assert set(CHANGES) | {"signature"} == {f.name for f in events.PolicyVersion.DESCRIPTOR.fields}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_a_field_changed_after_signing_is_refused_and_counted(run, field: str) -> None:
    root, signing, guard = run
    record = signed_record(root, signing)
    guard.check(record)  # as signed: admitted
    CHANGES[field](record)
    before = refused("bad_signature")
    with pytest.raises(Refused, match="bad_signature"):
        guard.check(record)
    assert not guard.admits(record)
    assert refused("bad_signature") == before + 1


def test_a_field_the_reader_does_not_know_is_covered_too(run) -> None:
    """A newer producer's field (unknown here) survives parsing and is part of what is verified."""
    root, signing, guard = run
    record = signed_record(root, signing)
    wire = record.SerializeToString() + b"\xc8\x01\x2a"  # field 25, varint 42: not in the contract
    parsed = events.PolicyVersion.FromString(wire)
    assert parsed.SerializeToString(deterministic=True) != record.SerializeToString(deterministic=True)
    with pytest.raises(Refused, match="bad_signature"):
        guard.check(parsed)


def test_the_signed_bytes_do_not_depend_on_map_order(run) -> None:
    root, signing, guard = run
    record = signed_record(root, signing)
    reordered = events.PolicyVersion()
    reordered.CopyFrom(record)
    reordered.ClearField("stats")
    for key in reversed(sorted(record.stats)):
        reordered.stats[key] = record.stats[key]
    guard.check(events.PolicyVersion.FromString(reordered.SerializeToString()))


def test_a_record_signed_over_the_old_triple_only_is_refused(run) -> None:
    """v1 signed (version, uri, sha256): such a signature let any other field be changed."""
    from cryptography.hazmat.primitives import serialization

    root, signing, guard = run
    record = signed_record(root, signing)
    key = serialization.load_pem_private_key(signing.read_bytes(), None)
    record.signature = key.sign(f"m1flow-policy/v1\n{record.version}\n{record.checkpoint_uri}\n"
                                f"{record.sha256}".encode())
    with pytest.raises(Refused, match="bad_signature"):
        guard.check(record)


def test_a_record_that_fails_to_load_does_not_hide_the_genuine_one_of_its_number(run) -> None:
    """With the learner's key, a wrong SHA-256 under version 5, before or after the genuine v5:
    the replica still loads the genuine one (it once skipped the version)."""
    root, signing, guard = run
    directory = root / "learner" / "checkpoints" / "v000005"
    sha = weights(directory, 5)
    genuine = sign(events.PolicyVersion(version=5, checkpoint_uri=uri_for(directory), sha256=sha), signing)
    bad = sign(events.PolicyVersion(version=5, checkpoint_uri=uri_for(directory), sha256="0" * 64), signing)
    for order in ((bad, genuine), (genuine, bad)):
        follower, engine = PolicyFollower(retry_s=60), RecordingEngine()
        for record in order:
            assert guard.admits(record)
            follower.announce(record)
        assert follower.load_if_due(engine) and engine.version == 5 and engine.loaded == [directory]
        assert follower.failures == (order[-1] is bad)  # the newest record is tried first
    follower, engine = PolicyFollower(retry_s=60), RecordingEngine()
    follower.announce(bad)
    assert not follower.load_if_due(engine) and follower.failures == 1
    assert not follower.due(engine.version)  # backing off from the bad record ...
    follower.announce(genuine)
    assert follower.due(engine.version) and follower.load_if_due(engine)  # ... not from the genuine one
    assert engine.version == 5


def test_svc_eval_tries_every_record_of_a_version_newest_first(run) -> None:
    root, signing, _ = run
    directory = root / "learner" / "checkpoints" / "v000004"
    sha = weights(directory, 4)
    genuine = sign(events.PolicyVersion(version=4, checkpoint_uri=uri_for(directory), sha256=sha), signing)
    bad = sign(events.PolicyVersion(version=4, checkpoint_uri=uri_for(directory), sha256="0" * 64), signing)
    gone = sign(events.PolicyVersion(version=4, checkpoint_uri=uri_for(root / "gone"), sha256=sha), signing)
    for order in ((bad, genuine), (genuine, bad), (gone, bad, genuine)):
        versions = Versions(RecordingEngine())
        for record in order:
            versions.add(record)
        assert versions.load(4) is None and versions.held == genuine
        assert versions.engine.loaded == [directory]
    versions = Versions(RecordingEngine())
    versions.add(gone)
    versions.add(bad)
    reason, _ = versions.load(4)
    assert reason == "checksum"  # none loads: the newest record's reason
    assert versions.load(9)[0] == "unknown_version"


def test_a_replica_whose_newest_version_does_not_load_takes_the_newest_that_does(run) -> None:
    """After compaction a restarting replica may find the newest genuine record gone and only a
    survivor of that number that does not load: it starts on the newest version that does."""
    root, signing, _ = run
    older = root / "learner" / "checkpoints" / "v000001"
    sha = weights(older, 1)
    follower, engine = PolicyFollower(retry_s=60, keep_versions=2), RecordingEngine()
    for version in (0, 1):
        follower.announce(sign(events.PolicyVersion(version=version, checkpoint_uri=uri_for(older), sha256=sha),
                               signing))
    follower.announce(sign(events.PolicyVersion(version=2, checkpoint_uri=uri_for(older), sha256="0" * 64), signing))
    assert sorted(follower.records) == [1, 2]  # the newest keep_versions versions only
    assert follower.load_if_due(engine) and engine.version == 1 and follower.failures == 1
    assert not follower.due(engine.version)  # v2 failed: retried after retry_s, not at every refresh


def test_the_charts_key_pair_a_key_and_a_self_signed_certificate_verifies(tmp_path: Path) -> None:
    """The chart makes the learner's key with Helm (`genPrivateKey "ed25519"`) and hands the replicas a
    self-signed certificate of it (Helm has no bare public key): the Guard reads the key from either."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def certificate(key, path: Path, algorithm=None) -> Path:  # noqa: ANN001
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "m1flow policy signing")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                .sign(key, algorithm))
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    key = ed25519.Ed25519PrivateKey.generate()
    signing = tmp_path / "tls.key"
    signing.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    guard = Guard(SecurityConfig(policy_verify_key=certificate(key, tmp_path / "tls.crt")))
    record = signed_record(tmp_path, signing)
    assert guard.admits(record)
    record.batch_groups = 1_000_000
    assert not guard.admits(record)

    ecdsa = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(ValueError, match="not an Ed25519 key"):
        Guard(SecurityConfig(policy_verify_key=certificate(ecdsa, tmp_path / "ec.crt", hashes.SHA256())))
