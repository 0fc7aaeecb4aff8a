"""The whole loop in secure mode over the real TLS broker: every service with its own certificate and
only its ACLs learns as in plaintext, and no line of any log holds key material."""
from __future__ import annotations

import subprocess
import sys

import pytest

from m1flow.bus import Producer
from ops import ROOT
from ops.stack import Stack
from m1flow.security import config as security
from ops.feed import publish
from m1flow.tasks.arith import problems

from tests.integration.helpers import content, policy_versions, scored_by_group, wait_for
from tests.integration.test_resilience import send_group

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


def test_a_replay_runs_as_the_services_principal_within_its_acls(tmp_path, as_operator):
    """`m1flow replay` on a secure broker: the service replays under its own certificate (not the
    operator's super user), in a group its ACLs allow, into `.suffix` topics the operator created."""
    stack = Stack(tmp_path, secure=True)
    try:
        stack.start(with_demo_policy=False, services=("reward",))
        as_operator(stack.broker.admin_security)
        producer = Producer(stack.bootstrap, "test", security=stack.broker.admin_security)
        send_group(producer, "secure-replay", ["2", "3"])
        wait_for(lambda: "secure-replay" in scored_by_group(stack.bootstrap), 120, "the group scored")

        def replay(group: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "ops", "--run-dir", str(tmp_path), "replay", "--topic",
                                   "rollouts", "--from", "0", "--group", group, "--service", "reward"],
                                  capture_output=True, text=True, cwd=ROOT, timeout=300)

        refused = replay("outside-the-prefix")  # a group the reward principal may not use
        assert refused.returncode != 0 and "m1flow-reward-" in refused.stderr, refused.stdout + refused.stderr
        done = replay("m1flow-reward-replay1")
        assert done.returncode == 0, done.stdout + done.stderr
        rescored = scored_by_group(stack.bootstrap, "scored.m1flow-reward-replay1")
        assert [content(g) for g in rescored["secure-replay"]] == \
            [content(g) for g in scored_by_group(stack.bootstrap)["secure-replay"]]
        log = next((tmp_path / "logs").glob("reward-9*.log")).read_text()
        assert "group m1flow-reward-replay1" in log
    finally:
        stack.stop()
