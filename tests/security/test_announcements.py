"""Forged `policy` records change no rollout's weights: a record naming a path outside the
checkpoint roots, one whose hash the weights do not match, and one not signed by the learner's key
(unsigned, another key, or the learner's signature moved onto another path) are refused and
counted; only the learner's own announcement loads. The engine's real load path runs (URI, root,
signature, checksum); only its model loading is a recorder."""
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
from m1flow.security.announcements import REFUSED, Guard, sign
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import signing_key
from m1flow.engines.base import Engine


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


def announce(follower: PolicyFollower, engine: RecordingEngine, policy: events.PolicyVersion) -> bool:
    follower.announce(policy)
    return follower.load_if_due(engine)


def refused(reason: str) -> float:
    return REFUSED.labels(reason)._value.get()


def test_only_the_learners_announcement_from_a_root_loads(run, tmp_path: Path) -> None:
    root, signing, guard = run
    follower, engine = PolicyFollower(retry_s=0, guard=guard), RecordingEngine()
    good = root / "learner" / "checkpoints" / "v000001"
    sha = weights(good, 1)
    real = sign(events.PolicyVersion(version=1, checkpoint_uri=uri_for(good), sha256=sha), signing)

    outside = tmp_path / "elsewhere" / "v000002"
    before = refused("outside_roots")
    forged = sign(events.PolicyVersion(version=2, checkpoint_uri=uri_for(outside), sha256=weights(outside, 2)), signing)
    assert not announce(follower, engine, forged)  # even the learner's key cannot point outside the roots
    traversal = events.PolicyVersion(version=2, checkpoint_uri=str(root / ".." / "elsewhere" / "v000002"), sha256=forged.sha256)
    assert not announce(follower, engine, sign(traversal, signing))
    assert refused("outside_roots") == before + 2

    other = root / "learner" / "checkpoints" / "v000003"
    other_sha = weights(other, 3)
    before = refused("unsigned")
    assert not announce(follower, engine, events.PolicyVersion(version=3, checkpoint_uri=uri_for(other), sha256=other_sha))
    assert refused("unsigned") == before + 1

    stranger = tmp_path / "stranger.key"
    stranger.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    before = refused("bad_signature")
    assert not announce(follower, engine, sign(events.PolicyVersion(version=3, checkpoint_uri=uri_for(other),
                                                                     sha256=other_sha), stranger))
    moved = events.PolicyVersion(version=3, checkpoint_uri=uri_for(other), sha256=other_sha, signature=real.signature)
    assert not announce(follower, engine, moved)  # the learner's signature of v1, on another record
    assert refused("bad_signature") == before + 2
    assert engine.loaded == [] and engine.version == -1 and follower.wanted is None

    wrong_hash = sign(events.PolicyVersion(version=4, checkpoint_uri=uri_for(other), sha256="0" * 64), signing)
    assert not announce(follower, engine, wrong_hash)  # signed and in a root, but not these weights
    assert engine.loaded == [] and follower.failures == 1

    newest = root / "learner" / "checkpoints" / "v000005"
    assert announce(follower, engine, sign(events.PolicyVersion(version=5, checkpoint_uri=uri_for(newest),
                                                                 sha256=weights(newest, 5)), signing))
    assert engine.loaded == [newest] and engine.version == 5


def test_without_roots_or_key_every_announcement_is_admitted_as_before(tmp_path: Path) -> None:
    follower, engine = PolicyFollower(retry_s=0, guard=Guard(SecurityConfig())), RecordingEngine()
    anywhere = tmp_path / "v000001"
    assert announce(follower, engine, events.PolicyVersion(version=1, checkpoint_uri=uri_for(anywhere),
                                                           sha256=weights(anywhere, 1)))
    assert engine.loaded == [anywhere]
