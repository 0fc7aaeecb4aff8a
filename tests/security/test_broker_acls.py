"""The secure broker over real TLS: a client without a certificate is refused, and each service's
principal can do what its row of the ACL table allows and nothing else (ops/acls.py)."""
from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from m1flow.bus.admin import ensure_topics
from m1flow.bus.clients import NotAuthorized, Settings, consumer
from m1flow.bus.producer import Producer
from m1flow.contracts import events
from ops.kafka import Broker
from ops.acls import apply_acls
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import CertificateAuthority


def block(secrets, name: str) -> SecurityConfig:
    ident = CertificateAuthority(secrets).identity(name)
    return SecurityConfig(enabled=True, ca_file=ident.ca, cert_file=ident.cert, key_file=ident.key)


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("secure")
    node = Broker(root / "kafka", secrets=root / "secrets")
    node.start()
    ensure_topics(node.bootstrap, security=node.admin_security)
    apply_acls(node.bootstrap, node.admin_security)
    yield node, root / "secrets"
    node.stop()


def admin_round_trip(bootstrap: str, **security) -> None:
    """List topics: the first thing any client does; raises when the broker does not let it in."""
    admin = KafkaAdminClient(**security, bootstrap_servers=bootstrap, request_timeout_ms=4000,
                             bootstrap_timeout_ms=5000)
    try:
        admin.list_topics()
    finally:
        admin.close()


def test_a_client_without_a_certificate_is_refused(secure_broker) -> None:
    node, secrets = secure_broker
    with pytest.raises(KafkaError):  # plaintext to a TLS listener
        admin_round_trip(node.bootstrap)
    with pytest.raises(KafkaError):  # TLS, trusting the CA, but no client certificate
        admin_round_trip(node.bootstrap, security_protocol="SSL", ssl_cafile=str(CertificateAuthority(secrets).cert_path))
    admin_round_trip(node.bootstrap, **block(secrets, "admin").kafka_python())  # the same call, credentialed


def test_a_certificate_from_another_ca_is_refused(secure_broker, tmp_path) -> None:
    node, _ = secure_broker
    stranger = block(tmp_path / "other-ca", "admin")  # the super user's name, not from the run's CA
    with pytest.raises(KafkaError):
        admin_round_trip(node.bootstrap, **{**stranger.kafka_python(), "ssl_cafile": str(secure_broker[1] / "ca.pem")})


@pytest.mark.parametrize("topic", ["policy", "control"])
def test_the_reward_principal_cannot_produce_to_policy_or_control(secure_broker, topic: str) -> None:
    node, secrets = secure_broker
    producer = Producer(node.bootstrap, "reward-0", security=block(secrets, "reward"))
    try:
        producer.send(topic, b"k", events.Control())
        with pytest.raises(TopicAuthorizationFailedError):
            producer.flush(timeout=20)
    finally:
        producer._producer.close(timeout=5)
    # its own output it may write
    allowed = Producer(node.bootstrap, "reward-0", security=block(secrets, "reward"))
    allowed.send("scored", b"g", events.ScoredGroup(group_id="g"))
    assert allowed.flush(timeout=20) == 1
    allowed.close()


def test_only_the_learner_writes_policy(secure_broker) -> None:
    node, secrets = secure_broker
    learner = Producer(node.bootstrap, "learner-0", security=block(secrets, "learner"))
    learner.send("policy", b"policy", events.PolicyVersion(version=1))
    assert learner.flush(timeout=20) == 1
    learner.close()


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_the_rollout_principal_cannot_read_the_learners_group(secure_broker, client: str) -> None:
    node, secrets = secure_broker
    settings = Settings(node.bootstrap, "m1flow-learner", "rollout-0", None, 10_000, 60_000, 10,
                        security=block(secrets, "rollout"))
    intruder = consumer(client, settings)
    try:
        with pytest.raises(Exception, match="(?i)authori[sz]"):
            intruder.commit({("scored", 0): 0})
    finally:
        intruder.close()
    own = consumer(client, Settings(node.bootstrap, "m1flow-rollout", "rollout-0", None, 10_000, 60_000, 10,
                                    security=block(secrets, "rollout")))
    try:
        own.commit({("prompts", 0): 0})  # its own group on its own input: allowed
    finally:
        own.close()


def test_the_sandbox_touches_no_topic(secure_broker) -> None:
    node, secrets = secure_broker
    sandbox = KafkaConsumer(**block(secrets, "sandbox").kafka_python(), bootstrap_servers=node.bootstrap,
                            group_id=None)
    try:
        assert not (sandbox.topics() & {"prompts", "rollouts", "scored", "policy", "control"})
    finally:
        sandbox.close()


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_a_group_the_principal_may_not_use_fails_poll_with_the_reason(secure_broker, client: str) -> None:
    """Retrying cannot mend a missing ACL: poll raises NotAuthorized (the service then exits saying
    so) instead of waiting for a group it will never join."""
    node, secrets = secure_broker
    intruder = consumer(client, Settings(node.bootstrap, "m1flow-learner", "rollout-0", None, 10_000, 60_000, 10,
                                         security=block(secrets, "rollout")))
    try:
        intruder.subscribe(["prompts"], lambda parts: None, lambda parts: None)
        with pytest.raises(NotAuthorized, match="(?i)authori[sz]"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                intruder.poll(500, 10)
    finally:
        intruder.close()
