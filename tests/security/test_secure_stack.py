"""`m1flow up --secure` as an insider would attack it, over the real TLS broker with the reward service
as a process: a `payload_uri` naming a FIFO, a device, a path outside the task store, an oversize or
a substituted file is refused with its reason at once while reward's gRPC health answers; the
reward process answers Score for the operator only (the method table reaches it); the monitor's
principal reads lag without seeing the ACL table; the run's secrets and logs are its owner's only;
an announcement may name only the learner's checkpoint folder."""
from __future__ import annotations

import hashlib
import json
import os
import stat

import grpc
import pytest
from kafka import KafkaAdminClient
from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePatternFilter,
                         ResourceType)
from kafka.errors import ClusterAuthorizationFailedError

from m1flow import store as stores
from m1flow.bus import Producer, codec
from m1flow.bus.topics import ROLLOUTS
from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.runtime import health
from m1flow.security import config as security
from m1flow.security import grpc_tls
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import CertificateAuthority
from m1flow.task_store import TaskStore
from ops.stack import Stack
from tests.integration.helpers import scored_by_group, wait_for

CAP = 4096  # the reward service's task_store.max_payload_bytes here


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A secure stack with the reward service (its sandbox never reached: every payload here is refused
    before a program could run), this process acting as the operator."""
    run = tmp_path_factory.mktemp("secure-stack")
    stack = Stack(run, secure=True, service_args={"reward": [
        "--sandbox-address", "127.0.0.1:1", "--task-store", json.dumps({"max_payload_bytes": CAP})]})
    before = security.current()
    try:
        stack.start(with_demo_policy=False, services=("reward",))
        yield stack
    finally:
        stack.stop()
        security.activate(before)


def identity(stack: Stack, name: str) -> SecurityConfig:
    ident = CertificateAuthority(stack.secrets).identity(name)
    return SecurityConfig(enabled=True, ca_file=ident.ca, cert_file=ident.cert, key_file=ident.key)


def swe_rollout(group: str, payload_uri: str) -> events.Rollout:
    """A group of one whose task names its repository snapshot by `payload_uri`, as a dataset row can."""
    spec = events.VerifierSpec(kind="swe", spec_json=json.dumps({"fail_to_pass": ["test_a"]}), payload_uri=payload_uri)
    return events.Rollout(header=codec.header("test", group_id=group, rollout_id=f"{group}/0", message_id=f"{group}/0"),
                          rollout_id=f"{group}/0", group_id=group, prompt_id=group, index=0, group_size=1,
                          task_type="swe", prompt_text="fix it", response_text="```diff\n--- a/x\n+++ b/x\n```",
                          finish_reason=events.FINISH_REASON_STOP, verifier=spec)


def test_a_payload_uri_is_read_only_as_a_capped_intact_file_of_the_task_store(stack, tmp_path):
    """Each hostile payload is refused with its reason, promptly: the FIFO does not hold a scoring
    thread, /dev/zero is not read, and the service's health answers all along."""
    store = TaskStore.in_run_dir(stack.run_dir)
    store.root.mkdir(parents=True, exist_ok=True)
    fifo = store.root / hashlib.sha256(b"fifo").hexdigest()
    os.mkfifo(fifo)
    big = store.root / hashlib.sha256(b"x" * (CAP + 1)).hexdigest()
    big.write_bytes(b"x" * (CAP + 1))
    swapped = store.root / hashlib.sha256(b"the snapshot").hexdigest()
    swapped.write_bytes(b"another snapshot")
    outside = tmp_path / hashlib.sha256(b"outside").hexdigest()
    outside.write_bytes(b"outside")
    zero = store.root / hashlib.sha256(b"zero").hexdigest()
    zero.symlink_to("/dev/zero")
    cases = {"fifo": (fifo.as_uri(), "not a regular file (a FIFO)"),
             "dev-zero": ("file:///dev/zero", "its name is not a SHA-256"),
             "dev-zero-link": (zero.as_uri(), "a symlink"),
             "outside": (outside.as_uri(), "outside the task store"),
             "oversize": (big.as_uri(), f"{CAP + 1} bytes, over the cap of {CAP}"),
             "wrong-hash": (swapped.as_uri(), "does not match its SHA-256 name")}
    producer = Producer(stack.bootstrap, "test-payloads", security=stack.broker.admin_security)
    for name, (uri, _) in cases.items():
        producer.send(ROLLOUTS, name, swe_rollout(name, uri))
    producer.flush()
    reward = stack.get("reward").grpc_address
    admin = stack.broker.admin_security
    wait_for(lambda: health.check(reward, timeout=2, security=admin) == "SERVING"
             and set(cases) <= set(scored_by_group(stack.bootstrap)), 60, "every hostile group scored, health up",
             detail=lambda: sorted(scored_by_group(stack.bootstrap)))
    scored = scored_by_group(stack.bootstrap)
    for name, (_, reason) in cases.items():
        [sample] = scored[name][0]["samples"]
        assert sample.get("status") == "STATUS_JUDGE_ERROR" and reason in sample.get("detail", ""), (name, sample)
    assert health.check(reward, timeout=2, security=admin) == "SERVING"


def test_the_reward_process_answers_score_for_the_operator_only(stack):
    """The issue's insider: the sandbox's own certificate (and the rollout's) called Score; now only
    the operator's is in Score's row, and a kind that runs programs is refused to it too."""
    address = stack.get("reward").grpc_address
    request = rpc.ScoreRequest(response="4", verifier=events.VerifierSpec(kind="arith", gold="4"))
    with grpc_tls.channel(address, security=stack.broker.admin_security) as ch:
        stub = rpc_grpc.RewardServiceStub(ch)
        assert stub.Score(request, timeout=30).reward == 1.0
        with pytest.raises(grpc.RpcError) as refused:
            stub.Score(rpc.ScoreRequest(response="print(1)", verifier=events.VerifierSpec(kind="code")), timeout=10)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    for insider in ("sandbox", "rollout", "monitor"):
        with grpc_tls.channel(address, security=identity(stack, insider)) as ch:
            with pytest.raises(grpc.RpcError) as refused:
                rpc_grpc.RewardServiceStub(ch).Score(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, insider


def test_the_monitor_reads_lag_but_not_the_acl_table(stack):
    """Its ACLs describe the m1flow-* groups only: ListGroups answers with those (the lag view needs
    no more), and DescribeAcls, a cluster-level read, is refused."""
    from svc_monitor.lag import LagReader

    monitor = identity(stack, "monitor")
    security.activate(monitor)  # LagReader builds its clients as the process's identity
    try:
        reader = LagReader(stack.bootstrap)
        try:
            wait_for(lambda: "m1flow-reward" in reader.sample(), 60, "the reward group's lag")
        finally:
            reader.close()
    finally:
        security.activate(stack.broker.admin_security)
    admin = KafkaAdminClient(**monitor.kafka_python(), bootstrap_servers=stack.bootstrap, request_timeout_ms=10_000)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                          permission_type=ACLPermissionType.ANY,
                                          resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                                                 ACLResourcePatternType.ANY)))
    finally:
        admin.close()


def test_secrets_and_logs_are_the_owners_only_and_announcements_name_only_checkpoints(stack):
    assert stat.S_IMODE(stack.secrets.stat().st_mode) == 0o700
    logs = [*(stack.run_dir / "logs").glob("*.log"), stack.run_dir / "kafka" / "broker.out",
            *(stack.run_dir / "kafka" / "logs").glob("*.log")]
    assert len(logs) >= 3 and {str(p): stat.S_IMODE(p.stat().st_mode) for p in logs} == {str(p): 0o600 for p in logs}
    block = SecurityConfig.model_validate_json(stack.identity_env("rollout")["M1FLOW_SECURITY"])
    roots = [stores.root_uri(r) for r in block.checkpoint_roots]
    assert stores.within((stack.run_dir / "learner" / "checkpoints" / "v000001").as_uri(), roots)
    for elsewhere in ("secrets/learner.sign.key", "secrets", "logs/reward-0.log", "policy0"):
        assert not stores.within((stack.run_dir / elsewhere).as_uri(), roots), elsewhere
