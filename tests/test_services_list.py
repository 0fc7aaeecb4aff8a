"""One list of services (ops/services.py): every service package is on it, and what starts,
lists, scales or breaks services (the launcher, `m1flow up`, `m1flow svc`, both chaos runs,
docker-compose.yml) agrees with it."""
from __future__ import annotations

import argparse

import pytest
import yaml

from ops import ROOT
from ops.chaos.cluster import TARGETS
from ops.chaos.run import ChaosConfig
from ops.cli import parser
from ops.launcher import ServiceProcess
from ops.services import NAMES, SERVICES, service
from ops.stack import Stack


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_every_service_package_is_listed_and_every_listed_one_runs():
    packages = sorted(p.name for p in ROOT.glob("svc_*") if (p / "__main__.py").exists())
    assert sorted(s.module for s in SERVICES) == packages
    assert len(set(NAMES)) == len(NAMES)


def test_compose_runs_each_listed_service_under_its_container_name():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for s in SERVICES:
        assert compose[s.container]["command"][:3] == ["python", "-m", s.module], s.name


def test_start_order_puts_each_service_after_what_it_needs():
    order = {name: i for i, name in enumerate(NAMES)}
    assert order["sandbox"] < order["reward"]  # the reward service gets the sandbox's address
    assert order["learner"] < order["rollout"]  # the learner announces v0, which rollout waits for


def test_what_starts_and_breaks_services_derives_from_the_list(tmp_path):
    assert tuple(Stack(tmp_path).replicas) == NAMES
    assert ChaosConfig().services == NAMES
    assert set(TARGETS) <= set(NAMES) and all(TARGETS[n] == service(n).container for n in TARGETS)
    svc = next(a for a in _subparser("svc")._actions if a.dest == "name")
    assert tuple(svc.choices) == NAMES
    assert ServiceProcess("reward", 0, tmp_path, []).command()[1:3] == ["-m", "svc_reward"]


def test_an_unknown_service_is_named_with_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown service 'rewrad'; known: sandbox, reward"):
        ServiceProcess("rewrad", 0, tmp_path, []).command()


def test_every_listed_service_has_a_principal_and_a_row_of_acls(tmp_path):
    """A service added to the list gets its certificate from `m1flow up --secure` by name; without
    a row in ops/acls.py the broker would deny it everything, so the row must be written."""
    from ops.acls import ACLS

    assert set(NAMES) <= set(ACLS), f"no ACL row for {sorted(set(NAMES) - set(ACLS))}"
    assert ACLS["sandbox"].read == ACLS["sandbox"].write == ()  # the sandbox touches no topic
    writers = {name for name, grants in ACLS.items() if "policy" in grants.write}
    assert writers == {"learner"}
    assert {name for name, grants in ACLS.items() if "control" in grants.write} == {"monitor"}
    # groups are granted by the prefix m1flow-<name>: no service's name may start another's
    assert not [(a, b) for a in NAMES for b in NAMES if a != b and b.startswith(a)]


def test_every_grpc_method_has_one_row_of_callers_and_the_services_get_that_table():
    """ops/acls.py's GRPC names every method of the proto's services and nothing else, under the service
    of SERVICES that serves it; files/service.env (compose and the chart) carries exactly that table."""
    from m1flow.contracts import rpc
    from ops.acls import GRPC, OPERATOR, grpc_methods, grpc_methods_json, grpc_service

    assert set(GRPC) == set(NAMES), f"no gRPC row for {sorted(set(NAMES) - set(GRPC))}"
    proto = {f"/{svc.full_name}/{m.name}" for svc in rpc.DESCRIPTOR.services_by_name.values() for m in svc.methods}
    assert set(grpc_methods()) == proto
    services = {s.full_name for s in rpc.DESCRIPTOR.services_by_name.values()}
    assert {n for n in NAMES if grpc_service(n) in services} == {n for n, methods in GRPC.items() if methods}
    assert {tuple(who) for m, who in grpc_methods().items() if not m.startswith("/m1flow.v1.SandboxService/")} \
        == {(OPERATOR,)}  # the operator's, nobody else's: no service calls another's method but the sandbox's
    env = (ROOT / "deploy" / "helm" / "m1flow" / "files" / "service.env").read_text().splitlines()
    assert f"M1FLOW_GRPC_METHODS={grpc_methods_json()}" in env, "python -m ops.acls --grpc gives the line"


def test_info_is_empty_when_the_readiness_file_goes_between_two_looks(tmp_path, monkeypatch):
    """A stopping service removes its readiness file whenever it likes; reading it then is "not
    ready", never an error that ends `m1flow up` (the chaos run's SIGTERM once failed that way)."""
    import json
    from pathlib import Path

    from m1flow.runtime.service import ready_file

    proc = ServiceProcess("reward", 0, tmp_path, [])
    path = ready_file(tmp_path, "reward", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"grpc": "127.0.0.1:1"}))
    assert proc.info() == {"grpc": "127.0.0.1:1"}
    real_read = Path.read_text

    def removed_first(self, *args, **kwargs):  # the service's unlink lands just before the read
        if self == path:
            self.unlink(missing_ok=True)
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", removed_first)
    assert proc.info() == {} and proc.grpc_address == ""
