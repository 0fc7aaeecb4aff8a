"""Shared fixtures: a real Kafka broker per test session (and fresh ones where isolation matters),
the warm-started small policies (tests/policies.py) and the local sandbox jail
(tests/sandbox/fixtures.py) for the sandbox and reward tests."""
from __future__ import annotations

import pytest

from m1flow.bus.admin import ensure_topics
from m1flow.kafka import Broker
from tests.policies import hybrid_policy, qwen2_policy  # noqa: F401  (fixtures)
from tests.sandbox.fixtures import jail_sandbox  # noqa: F401  (fixture)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory):
    node = Broker(tmp_path_factory.mktemp("kafka"))
    node.start()
    ensure_topics(node.bootstrap)
    yield node
    node.stop()


@pytest.fixture(scope="session")
def bootstrap(broker: Broker) -> str:
    return broker.bootstrap
