"""The whole loop in secure mode over the real TLS broker: every service with its own certificate and
only its ACLs learns as in plaintext, and no line of any log holds key material."""
from __future__ import annotations

import pytest

from m1flow.bus import Producer
from m1flow.ops.stack import Stack
from m1flow.security import config as security
from m1flow.source import publish
from m1flow.tasks.arith import problems

from tests.integration.helpers import policy_versions, scored_by_group, wait_for

N_PROMPTS, GROUP, BATCH = 8, 4, 4


@pytest.fixture
def as_operator():
    """This test process acts as the operator (admin principal) while it reads topics; restored after."""
    before = security.current()
    yield lambda block: security.activate(block)
    security.activate(before)


def test_the_loop_learns_in_secure_mode_and_logs_no_secret(tmp_path, as_operator):
    stack = Stack(tmp_path, secure=True,
                  service_args={"learner": ["--batch-groups", str(BATCH), "--algorithm", '{"dynamic_sampling": false}'],
                                "rollout": ["--max-ahead-versions", "0"]})
    try:
        stack.start(services=("learner", "reward", "rollout", "monitor"))
        admin = stack.broker.admin_security
        as_operator(admin)
        ids = publish(Producer(stack.bootstrap, "test", security=admin), problems(seed=3, n=N_PROMPTS, max_operand=20),
                      GROUP)
        wait_for(lambda: len(scored_by_group(stack.bootstrap)) >= N_PROMPTS, 240, "all groups scored")
        wait_for(lambda: max(policy_versions(stack.bootstrap)) >= 2, 120, "two policy versions")
        scored = scored_by_group(stack.bootstrap)
        assert sorted(g.split("/")[0] for g in scored) == sorted(ids)
    finally:
        stack.stop()
    keys = [line for path in (tmp_path / "secrets").glob("*.key")
            for line in path.read_text().splitlines() if line and not line.startswith("-----")]
    assert keys
    logs = list((tmp_path / "logs").glob("*.log")) + list((tmp_path / "kafka").rglob("*.log")) \
        + [tmp_path / "kafka" / "broker.out"]
    assert len(logs) >= 5
    for path in logs:
        text = path.read_text(errors="replace")
        assert "PRIVATE KEY" not in text, path
        assert not [k for k in keys if k in text], path
