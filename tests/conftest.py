"""Shared fixtures: a real Kafka broker per test session (and fresh ones where isolation matters),
the warm-started small policies (tests/policies.py) and the local sandbox jail
(tests/sandbox/fixtures.py) for the sandbox and reward tests."""
from __future__ import annotations

import os

import pytest
import torch

# Triton's own @jit helpers are bound to the interpreter or the compiler when triton is first
# imported, and importing transformers (ops.warmstart, at collection) imports it: on a machine
# without a GPU the Triton kernel tests need the interpreter chosen before that. Only CUDA tensors
# ever take the Triton path (kernels/lightning_attn/api.py), so nothing else changes.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from m1flow.bus.admin import ensure_topics
from ops.kafka import Broker
from tests.policies import hybrid_policy, qwen2_policy  # noqa: F401  (fixtures)
from tests.sandbox.fixtures import jail_sandbox  # noqa: F401  (fixture)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Kubernetes tier runs last: on a cold machine `make test` builds its binaries in the
    background meanwhile (scripts/test.sh), and its fixture waits for that build."""
    items.sort(key=lambda item: item.nodeid.startswith("tests/k8s/"))


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
