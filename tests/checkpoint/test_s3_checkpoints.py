"""Policies and learner checkpoints through a real S3-compatible server (s3s-fs, tests/checkpoint/
s3_fixtures.py): the learner's Trainer writes each version to s3://bucket/prefix and announces it
(signed); a rollout engine on "another node" (its own directories) admits it by the s3 root,
downloads it into its bounded cache, checks the SHA-256 and loads it; a tampered object and a URI
outside the roots are refused and counted; a learner on a fresh node resumes (version, offsets,
optimizer) from the store; old versions rotate away on the store as on a disk."""
from __future__ import annotations

from pathlib import Path

import obstore
import pytest
import torch

from m1flow import checkpoint, store
from m1flow.contracts import events
from m1flow.policy_follower import PolicyFollower
from m1flow.rl.config import AlgorithmConfig
from m1flow.security.announcements import REFUSED, Guard, sign
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import signing_key
from m1flow.status import Status
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, build_model
from svc_learner.config import LearnerServiceConfig
from svc_learner.trainer import Trainer
from m1flow.engines.hf import HFEngine

pytestmark = pytest.mark.timeout(300)


def scored_group(gid: str, vocab: int) -> events.ScoredGroup:
    g = torch.Generator().manual_seed(len(gid) + sum(map(ord, gid)))
    group = events.ScoredGroup(group_id=gid, group_size=4)
    for i in range(4):
        tokens = torch.randint(3, vocab, (5 + i,), generator=g).tolist()
        group.samples.add(index=i, prompt_token_ids=[1, 5, 6], token_ids=tokens, logprobs=[-2.0] * len(tokens),
                          reward=float(i % 2), status=Status.OK, temperature=1.0, top_p=1.0)
    return group


def train_step(trainer: Trainer, step: int) -> None:
    vocab = trainer.model.config.vocab_size
    selected = [AlgorithmConfig().select(scored_group(f"s{step}g{i}", vocab), current_version=0)
                for i in range(2)]
    trainer.step(selected, {"scored/0": 2 * step})


def objects(server, prefix: str) -> list[str]:
    client = store.client(server.config(), server.bucket)
    return sorted(m["path"] for batch in obstore.list(client, prefix=prefix) for m in batch)


class GuardedFollower(PolicyFollower):
    """A replica's policy follower behind its guard, as svc_rollout wires them (its ControlFollower
    passes on only what the guard admits)."""

    def __init__(self, guard: Guard) -> None:
        super().__init__(retry_s=0)
        self.guard = guard

    def announce(self, policy: events.PolicyVersion) -> None:
        if self.guard.admits(policy):
            super().announce(policy)


def refused(reason: str) -> float:
    return REFUSED.labels(reason)._value.get()


@pytest.fixture
def policy0(tmp_path: Path) -> Path:
    tok = build_tokenizer()
    return checkpoint.save_policy(tmp_path / "p0", build_model(tok, WarmStartConfig(arch="qwen2")), tok)


def learner_config(server, node: Path, policy0: Path, prefix: str, **kw) -> LearnerServiceConfig:
    return LearnerServiceConfig(run_dir=node, init_checkpoint=policy0, batch_groups=2,
                                checkpoint_uri=f"s3://{server.bucket}/{prefix}", store=server.config(),
                                train={"lr": 1e-3, "minibatches": 1}, **kw)


def test_learner_writes_to_s3_and_a_rollout_loads_it_checked(s3_server, policy0: Path, tmp_path: Path) -> None:
    signing, public = signing_key(tmp_path / "secrets", "learner")
    cfg = learner_config(s3_server, tmp_path / "learner-node", policy0, "run1/ckpt",
                         security=SecurityConfig(policy_signing_key=signing), keep_checkpoints=3)
    trainer = Trainer(cfg)  # writes v0 to the store
    train_step(trainer, 1)
    announced = trainer.announcement("run1")
    assert announced.checkpoint_uri == f"s3://{s3_server.bucket}/run1/ckpt/v000001"
    keys = objects(s3_server, "run1/ckpt/v000001/")
    assert {"run1/ckpt/v000001/" + f for f in (checkpoint.STATE_FILE, checkpoint.OPTIMIZER_FILE,
                                                checkpoint.WEIGHTS_FILE, "config.json", "tokenizer.json")} <= set(keys)
    assert sorted(p.name for p in cfg.checkpoint_root().glob("v*")) == ["v000001"]  # staging: the newest only

    engine, follower = a_rollout_on_another_node_loads(announced, trainer, s3_server, public, tmp_path)
    second = a_tampered_object_is_refused(trainer, engine, follower, s3_server, tmp_path)
    uris_outside_the_roots_are_refused(trainer, follower, second, s3_server, signing)
    newer_versions_load_and_the_store_rotates(trainer, engine, follower, s3_server, signing, tmp_path)


def a_rollout_on_another_node_loads(announced: events.PolicyVersion, trainer: Trainer, s3_server, public: Path,
                                    tmp_path: Path) -> tuple[HFEngine, PolicyFollower]:
    """A rollout on another node: only the store and its own cache directory in common with the learner."""
    rollout_store = s3_server.config(cache_keep=2)
    engine = HFEngine(batch_groups=1, group_size=2, device="cpu")
    engine.policies = store.PolicyCache(rollout_store, tmp_path / "rollout-node" / "cache")
    guard = Guard(SecurityConfig(checkpoint_roots=[f"s3://{s3_server.bucket}/run1"], policy_verify_key=public))
    follower = GuardedFollower(guard)
    follower.announce(announced)
    assert follower.load_if_due(engine) and engine.version == 1
    cached = list((tmp_path / "rollout-node" / "cache").iterdir())
    assert len(cached) == 1 and checkpoint.weights_sha256(cached[0]) == announced.sha256
    assert not (cached[0] / checkpoint.OPTIMIZER_FILE).exists()  # inference needs no optimizer state
    for name, value in engine.model.state_dict().items():
        assert torch.equal(value, trainer.model.state_dict()[name].to(value.dtype)), name
    return engine, follower


def a_tampered_object_is_refused(trainer: Trainer, engine: HFEngine, follower: PolicyFollower, s3_server,
                                 tmp_path: Path) -> events.PolicyVersion:
    """The weights of v2 overwritten on the store after the announcement: refused, the bad copy not kept."""
    train_step(trainer, 2)
    second = trainer.announcement("run1")
    client = store.client(s3_server.config(), s3_server.bucket)
    weights_key = "run1/ckpt/v000002/" + checkpoint.WEIGHTS_FILE
    blob = bytearray(bytes(obstore.get(client, weights_key).bytes()))
    blob[-1] ^= 0xFF
    obstore.put(client, weights_key, bytes(blob))
    follower.announce(second)
    assert not follower.load_if_due(engine)
    assert engine.version == 1 and follower.failures == 1
    assert len(list((tmp_path / "rollout-node" / "cache").iterdir())) == 1  # the bad copy is not kept
    return second


def uris_outside_the_roots_are_refused(trainer: Trainer, follower: PolicyFollower, second: events.PolicyVersion,
                                       s3_server, signing: Path) -> None:
    """Even signed by the learner's key: refused and counted."""
    before = refused("outside_roots")
    for uri in (f"s3://{s3_server.bucket}/elsewhere/v000003", f"s3://{s3_server.bucket}/run1-evil/v000003",
                f"s3://other/run1/ckpt/v000003", f"s3://{s3_server.bucket}/run1/../elsewhere/v000003",
                checkpoint.uri_for(trainer.current_dir)):  # the learner's local staging copy: not a root
        forged = sign(events.PolicyVersion(version=3, checkpoint_uri=uri, sha256=second.sha256), signing)
        follower.announce(forged)
    assert refused("outside_roots") == before + 5 and follower.wanted.version == 2


def newer_versions_load_and_the_store_rotates(trainer: Trainer, engine: HFEngine, follower: PolicyFollower,
                                              s3_server, signing: Path, tmp_path: Path) -> None:
    """v3 and v4 untampered load; the cache keeps the newest two, the store the newest three."""
    train_step(trainer, 3)
    train_step(trainer, 4)
    for version in (3, 4):
        uri = f"s3://{s3_server.bucket}/run1/ckpt/v{version:06d}"
        local = engine.policies.local(uri)
        sha = checkpoint.weights_sha256(local)
        follower.announce(sign(events.PolicyVersion(version=version, checkpoint_uri=uri, sha256=sha), signing))
        assert follower.load_if_due(engine) and engine.version == version
    assert len(list((tmp_path / "rollout-node" / "cache").iterdir())) == 2
    # the store rotated past the newest three (grace 60 s: the superseded ones wait; 0 here drops them)
    trainer.store.rotate(keep=3, grace_s=0.0)
    versions = sorted({k.split("/")[2] for k in objects(s3_server, "run1/ckpt/")})
    assert versions == ["v000002", "v000003", "v000004"]


def test_a_learner_on_a_fresh_node_resumes_from_s3(s3_server, policy0: Path, tmp_path: Path) -> None:
    cfg = learner_config(s3_server, tmp_path / "node-a", policy0, "run2/ckpt", keep_checkpoints=1,
                         checkpoint_grace_s=0.0)
    trainer = Trainer(cfg)
    train_step(trainer, 1)
    train_step(trainer, 2)
    versions = sorted({k.split("/")[2] for k in objects(s3_server, "run2/ckpt/")})
    assert versions == ["v000002"]  # keep 1, no grace: the older ones are gone from the store

    moved = cfg.model_copy(update={"run_dir": tmp_path / "node-b", "init_checkpoint": None})
    resumed = Trainer(moved)  # nothing local on node-b: everything from the store
    assert resumed.resumed is not None and tmp_path / "node-b" in resumed.resumed.parents
    assert resumed.state.version == 2 and resumed.start_offsets(replay=False) == {"scored/0": 4}
    assert resumed.state.applied_groups == trainer.state.applied_groups
    assert resumed.current_uri == f"s3://{s3_server.bucket}/run2/ckpt/v000002" and resumed.sha == trainer.sha
    before, after = trainer.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert before["state"].keys() == after["state"].keys() and before["state"]
    for key, slot in before["state"].items():
        for name, value in slot.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(after["state"][key][name])), (key, name)
    train_step(resumed, 3)  # and goes on writing to the same store
    assert resumed.announcement("run2").checkpoint_uri.endswith("/run2/ckpt/v000003")


def test_a_missing_s3_policy_fails_to_load_and_sampling_goes_on(s3_server, tmp_path: Path) -> None:
    engine = HFEngine(batch_groups=1, group_size=2, device="cpu")
    engine.policies = store.PolicyCache(s3_server.config(), tmp_path / "cache")
    follower = PolicyFollower(retry_s=0)
    follower.announce(events.PolicyVersion(version=1, checkpoint_uri=f"s3://{s3_server.bucket}/nothing/v000001",
                                           sha256="0" * 64))
    assert not follower.load_if_due(engine) and follower.failures == 1 and engine.version == -1


def test_credentials_from_the_aws_environment(s3_server, tmp_path: Path, monkeypatch) -> None:
    """What the chart gives a pod: the keys as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (a Secret's
    envFrom), only the endpoint in `store`; wrong keys are refused by the server."""
    from tests.checkpoint.s3_fixtures import ACCESS, SECRET

    src = tmp_path / "v1"
    src.mkdir()
    (src / checkpoint.STATE_FILE).write_text("{}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    cfg = store.StoreConfig(endpoint_url=s3_server.endpoint)
    store.upload_file(cfg, src / checkpoint.STATE_FILE, f"s3://{s3_server.bucket}/env/v1/{checkpoint.STATE_FILE}")
    assert objects(s3_server, "env/") == [f"env/v1/{checkpoint.STATE_FILE}"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(Exception, match="(?i)signature|forbidden|403|access"):
        store.upload_file(store.StoreConfig(endpoint_url=s3_server.endpoint, region="eu-west-1"),
                          src / checkpoint.STATE_FILE, f"s3://{s3_server.bucket}/env/v2/x")
