"""Shared fixtures: a real Kafka broker per test session (and fresh ones where isolation matters),
the warm-started small policies (tests/policies.py) and the local sandbox jail
(tests/sandbox/fixtures.py) for the sandbox and reward tests."""
from __future__ import annotations

import os
from pathlib import Path

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


TESTS = Path(__file__).parent
# The tiers (README "Tests"): what a test needs decides its tier. `make test` runs them side by side in
# a few xdist workers (scripts/test.sh), the heavy ones first so the light ones fill in around them.
TIERS = ("chaos", "docker", "k8s", "s3", "kafka", "sandbox", "slow", "unit")
# scripts/test.sh compiles these tiers' tools in the background and names the ones still building in
# M1FLOW_BUILDING: their tests go last, so a cold machine builds them while the other tiers run.
BUILT_BY = {"compose": "docker", "s3": "s3", "k8s": "k8s"}


def tier_of(item: pytest.Item) -> str:
    """The tier of a test, from its folder and the fixtures it uses."""
    parts = Path(str(item.fspath)).relative_to(TESTS).parts
    uses = set(getattr(item, "fixturenames", ()))
    if parts[0] == "k8s":
        return "k8s"
    if "s3_server" in uses:
        return "s3"
    if uses & {"docker_engine", "run_image"}:
        return "docker"
    if parts[:2] == ("integration", "test_chaos.py"):
        return "chaos"
    if parts[0] in ("integration", "security") or item.get_closest_marker("kafka") or uses & {"broker", "bootstrap"}:
        return "kafka"
    if parts[0] == "sandbox" or "jail_sandbox" in uses:
        return "sandbox"
    return "slow" if item.get_closest_marker("slow") else "unit"


def worker_group(nodeid: str) -> str:
    """Which tests one xdist worker runs together, from the test's id alone (the scheduler sees no more):
    a tier whose session fixture is costly (one API server, one image build, one S3 server) or heavy
    (the chaos runs, each a whole `m1flow up`) as one group; otherwise a module (its tests share module
    fixtures and may build on each other's state)."""
    path = nodeid.split("::")[0]
    if path.startswith("tests/k8s/"):
        return "k8s"
    if path == "tests/integration/test_chaos.py":
        return "chaos"
    if path.startswith(("tests/cluster/", "tests/sandbox/test_docker")):
        return "docker"
    if path.startswith("tests/checkpoint/test_s3_"):
        return "s3"
    return path


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201
    """`--dist loadscope` with scopes from worker_group. (xdist's own `loadgroup` marks do not take with
    pytest 9, which no longer reads the node id xdist rewrites.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TierGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return TierGroups(config, log)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Each test is marked with its tier as it is collected (`-m unit` is `make test-fast`)."""
    tier = tier_of(item)
    item.add_marker(getattr(pytest.mark, tier))
    item.user_properties.append(("tier", tier))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tiers in order: the heavy first, those whose tools are still building last."""
    building = {BUILT_BY[name] for name in os.environ.get("M1FLOW_BUILDING", "").split() if name in BUILT_BY}
    order = {tier: (tier in building, i) for i, tier in enumerate(TIERS)}
    items.sort(key=lambda item: order[dict(item.user_properties)["tier"]])


_tier_seconds: dict[str, float] = {}
_tier_tests: dict[str, int] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Adds each phase's duration to its test's tier (the reports reach here from xdist workers too)."""
    tier = dict(report.user_properties).get("tier")
    if tier:
        _tier_seconds[tier] = _tier_seconds.get(tier, 0.0) + report.duration
        _tier_tests[tier] = _tier_tests.get(tier, 0) + (report.when == "call")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    """The minutes each tier's tests took (summed over its tests: with workers, more than the wall time)."""
    if not _tier_seconds:
        return
    terminalreporter.write_sep("=", "minutes per tier (sum of its tests' set-up, call and tear-down)")
    for tier in sorted(_tier_seconds, key=TIERS.index):
        terminalreporter.write_line(f"{tier:>8}: {_tier_tests[tier]:>5} tests {_tier_seconds[tier] / 60:7.1f} min")


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
