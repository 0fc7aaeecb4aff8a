"""Authorization per gRPC method over real mutual TLS with the run CA's certificates: every method of
every service called by every principal (each service of SERVICES and the operator) answers exactly
the principals its row of ops/acls.py's GRPC names; Score never runs programs for its caller; the
request fields that cost resources are capped with INVALID_ARGUMENT naming the field."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.runtime import health
from m1flow.security import grpc_tls
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import CertificateAuthority
from ops.acls import OPERATOR, grpc_methods
from ops.services import NAMES

PRINCIPALS = (*NAMES, OPERATOR)
# every service the proto declares, as its generated base servicer (UNIMPLEMENTED): what the call
# meets once the interceptor lets it through
SERVICERS = {svc.full_name: (getattr(rpc_grpc, f"{svc.name}Servicer"),
                             getattr(rpc_grpc, f"add_{svc.name}Servicer_to_server"))
             for svc in rpc.DESCRIPTOR.services_by_name.values()}


def identity(secrets: Path, name: str) -> SecurityConfig:
    ident = CertificateAuthority(secrets).identity(name)
    return SecurityConfig(enabled=True, ca_file=ident.ca, cert_file=ident.cert, key_file=ident.key)


@contextmanager
def serving(secrets: Path, servicers: list, table: dict[str, list[str]]) -> Iterator[str]:
    """A gRPC server as a service's: mutual TLS with the `sandbox` identity, the method table."""
    server, port, servicer = health.grpc_server("127.0.0.1", 0, 4, identity(secrets, "sandbox"), table)
    for add, impl in servicers:
        add(impl, server)
    health.set_serving(servicer, [], True)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def call(address: str, who: SecurityConfig, method: str, request: bytes = b"",
         streaming: bool = False) -> grpc.StatusCode:
    """The status a call of `method` (a full name) as `who` ends with."""
    with grpc_tls.channel(address, security=who) as ch:
        try:
            if streaming:
                list(ch.unary_stream(method)(request, timeout=10))
            else:
                ch.unary_unary(method)(request, timeout=10)
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def test_every_method_answers_exactly_the_principals_of_its_row(tmp_path):
    table = grpc_methods()
    servicers = [(add, cls()) for cls, add in SERVICERS.values()]
    streaming = {f"/{s.full_name}/{m.name}" for s in rpc.DESCRIPTOR.services_by_name.values() for m in s.methods
                 if m.server_streaming}
    with serving(tmp_path, servicers, table) as address:
        identities = {name: identity(tmp_path, name) for name in PRINCIPALS}
        got = {(method, name): call(address, identities[name], method, streaming=method in streaming)
               for method in table for name in PRINCIPALS}
        assert all(health.check(address, security=identities[n]) == "SERVING" for n in PRINCIPALS)  # any principal
    want = {(method, name): grpc.StatusCode.UNIMPLEMENTED if name in table[method] else grpc.StatusCode.PERMISSION_DENIED
            for method in table for name in PRINCIPALS}
    assert got == want
    assert {n for (m, n), code in got.items() if code != grpc.StatusCode.PERMISSION_DENIED} == {"reward", OPERATOR}


def test_score_never_runs_programs_and_every_costly_field_is_capped(tmp_path):
    """As the operator, whom the table allows: Score scores an arithmetic answer but refuses a code
    (or SWE) spec, which would run the caller's program in the sandbox as `reward`; a response,
    a Generate's tokens or samples, a Report's events over the cap are INVALID_ARGUMENT naming the
    field, refused before the engine or the store is touched (neither exists here)."""
    from svc_monitor.report import MAX_EVENTS, MonitorGrpc
    from svc_reward.config import RewardConfig, ScoreCaps
    from svc_reward.scorers import ScorerRegistry
    from svc_reward.service import RewardGrpc
    from svc_rollout.config import GenerateCaps
    from svc_rollout.service import RolloutGrpc

    caps = ScoreCaps(max_response_chars=1000)
    registry = ScorerRegistry(RewardConfig(sandbox_address="127.0.0.1:1"))
    servicers = [(rpc_grpc.add_RewardServiceServicer_to_server, RewardGrpc(registry, caps)),
                 (rpc_grpc.add_RolloutServiceServicer_to_server, RolloutGrpc(None, GenerateCaps())),
                 (rpc_grpc.add_MonitorServiceServicer_to_server, MonitorGrpc(None, None, lambda: ""))]
    try:
        with serving(tmp_path, servicers, grpc_methods()) as address, \
                grpc_tls.channel(address, security=identity(tmp_path, OPERATOR)) as ch:
            score = rpc_grpc.RewardServiceStub(ch).Score
            arith = events.VerifierSpec(kind="arith", gold="4")
            assert score(rpc.ScoreRequest(response="4", verifier=arith), timeout=30).reward == 1.0
            for kind in ("code", "swe"):
                with pytest.raises(grpc.RpcError) as refused:
                    score(rpc.ScoreRequest(response="print(1)", verifier=events.VerifierSpec(kind=kind)), timeout=10)
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "runs programs in svc_sandbox" in refused.value.details()
            generate = rpc_grpc.RolloutServiceStub(ch).Generate
            report = rpc_grpc.MonitorServiceStub(ch).Report
            for field, rpc_call in (
                    ("response", lambda: score(rpc.ScoreRequest(response="4" * 1001, verifier=arith), timeout=10)),
                    ("max_new_tokens", lambda: list(generate(rpc.GenerateRequest(prompt="1+1=", max_new_tokens=10**6),
                                                             timeout=10))),
                    ("n", lambda: list(generate(rpc.GenerateRequest(prompt="1+1=", n=10_000), timeout=10))),
                    ("max_events", lambda: report(rpc.ReportRequest(max_events=MAX_EVENTS + 1), timeout=10))):
                with pytest.raises(grpc.RpcError) as refused:
                    rpc_call()
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
                assert refused.value.details().startswith(f"{field}: "), refused.value.details()
                assert "over the server's cap" in refused.value.details()
    finally:
        registry.close()
