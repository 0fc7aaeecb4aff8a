"""gRPC mutual TLS over real sockets: a server refuses a client without a certificate (or with one
from another CA), health answers any principal of the run's CA, and a method answers only the
principals its row of the method table names (here, as the sandbox's: `reward`), every other with
PERMISSION_DENIED; a method without a row answers no one."""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from m1flow.runtime import health
from m1flow.security import grpc_tls
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import CertificateAuthority


def block(folder, name: str, **extra) -> SecurityConfig:
    ident = CertificateAuthority(folder).identity(name)
    return SecurityConfig(enabled=True, ca_file=ident.ca, cert_file=ident.cert, key_file=ident.key, **extra)


WHO = {"/test.Echo/Who": ["reward"]}  # the method table of these servers: as the sandbox's rows


class Echo(grpc.GenericRpcHandler):
    """A real method on the server beside health: returns the caller's principal."""

    def service(self, details):  # noqa: ANN001, ANN201
        if details.method != "/test.Echo/Who":
            return None
        return grpc.unary_unary_rpc_method_handler(lambda req, ctx: grpc_tls.peer_name(ctx).encode(),
                                                   request_deserializer=bytes, response_serializer=bytes)


@pytest.fixture
def sandbox_like(tmp_path):
    server, port, servicer = health.grpc_server("127.0.0.1", 0, 2, block(tmp_path, "sandbox"), WHO)
    server.add_generic_rpc_handlers((Echo(),))
    health.set_serving(servicer, [], True)
    server.start()
    yield f"127.0.0.1:{port}", tmp_path
    server.stop(0)


def who(address: str, security: SecurityConfig | None) -> bytes:
    with grpc_tls.channel(address, security=security) as ch:
        return ch.unary_unary("/test.Echo/Who", request_serializer=bytes, response_deserializer=bytes)(b"", timeout=5)


def test_no_certificate_is_refused(sandbox_like) -> None:
    address, _ = sandbox_like
    assert health.check(address, security=SecurityConfig()) == "UNREACHABLE"  # plaintext
    with pytest.raises(grpc.RpcError) as err:
        who(address, SecurityConfig())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_from_another_ca_is_refused(sandbox_like, tmp_path_factory) -> None:
    address, secrets = sandbox_like
    stranger = block(tmp_path_factory.mktemp("other-ca"), "reward")
    stranger = stranger.model_copy(update={"ca_file": secrets / "ca.pem"})  # trusts the server, not trusted by it
    with pytest.raises(grpc.RpcError) as err:
        who(address, stranger)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_health_answers_any_principal_and_the_methods_only_the_reward_service(sandbox_like) -> None:
    address, secrets = sandbox_like
    assert health.check(address, security=block(secrets, "admin")) == "SERVING"
    assert who(address, block(secrets, "reward")) == b"reward"
    for name in ("rollout", "admin"):
        with pytest.raises(grpc.RpcError) as err:
            who(address, block(secrets, name))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_method_without_a_row_answers_no_one_and_allowed_peers_only_narrow(tmp_path) -> None:
    """Fail closed: a server handed no table answers no principal on its methods (health still
    answers); the older `grpc_allowed_peers` can narrow a row, never widen one."""
    for table, only, admitted in (({}, [], set()), (WHO, ["rollout"], set()), (WHO, ["reward", "admin"], {"reward"})):
        server, port, servicer = health.grpc_server("127.0.0.1", 0, 2, block(tmp_path, "sandbox",
                                                                             grpc_allowed_peers=only), table)
        server.add_generic_rpc_handlers((Echo(),))
        health.set_serving(servicer, [], True)
        server.start()
        try:
            address = f"127.0.0.1:{port}"
            assert health.check(address, security=block(tmp_path, "rollout")) == "SERVING"
            for name in ("reward", "admin", "rollout"):
                if name in admitted:
                    assert who(address, block(tmp_path, name)) == name.encode()
                    continue
                with pytest.raises(grpc.RpcError) as err:
                    who(address, block(tmp_path, name))
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert ("no row" in err.value.details()) == (not table)
        finally:
            server.stop(0)


def grpc_block(kafka_folder, grpc_folder, name: str, **extra) -> SecurityConfig:
    """A process whose Kafka identity and gRPC identity come from two CAs (the chart: Strimzi's, its own)."""
    ident = CertificateAuthority(grpc_folder).identity(name)
    return block(kafka_folder, name, grpc_ca_file=ident.ca, grpc_cert_file=ident.cert, grpc_key_file=ident.key,
                 **extra)


def test_a_grpc_identity_from_its_own_ca_serves_grpc_and_the_kafka_one_does_not(tmp_path) -> None:
    kafka_ca, grpc_ca = tmp_path / "kafka", tmp_path / "grpc"
    server_block = grpc_block(kafka_ca, grpc_ca, "sandbox")
    server, port, servicer = health.grpc_server("127.0.0.1", 0, 2, server_block, WHO)
    server.add_generic_rpc_handlers((Echo(),))
    health.set_serving(servicer, [], True)
    server.start()
    try:
        address = f"127.0.0.1:{port}"
        assert who(address, grpc_block(kafka_ca, grpc_ca, "reward")) == b"reward"
        kafka_only = block(kafka_ca, "reward")  # a certificate of the Kafka CA, not of the gRPC one
        kafka_only = kafka_only.model_copy(update={"ca_file": grpc_ca / "ca.pem"})  # it trusts the server
        with pytest.raises(grpc.RpcError) as err:
            who(address, kafka_only)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0)


def test_the_grpc_files_go_together(tmp_path) -> None:
    ident = CertificateAuthority(tmp_path).identity("reward")
    with pytest.raises(ValueError, match="go together"):
        block(tmp_path, "reward", grpc_cert_file=ident.cert)


def test_the_probe_presents_the_services_own_identity_from_its_environment(tmp_path) -> None:
    """python -m m1flow.runtime.probe, as the chart's exec probe and compose's healthcheck run it."""
    import os
    import subprocess
    import sys

    from ops import ROOT

    own = grpc_block(tmp_path / "kafka", tmp_path / "grpc", "sandbox")
    server, port, servicer = health.grpc_server("127.0.0.1", 0, 2, own, WHO)
    health.set_serving(servicer, ["m1flow.v1.SandboxService"], True)
    server.start()

    def probe(service: str, security: SecurityConfig | None) -> tuple[int, str]:
        env = {k: v for k, v in os.environ.items() if k != "M1FLOW_SECURITY"}
        if security is not None:
            env["M1FLOW_SECURITY"] = security.model_dump_json()
        out = subprocess.run([sys.executable, "-m", "m1flow.runtime.probe", "--address", f"localhost:{port}",
                              "--service", service], env=dict(env, PYTHONPATH=str(ROOT)), capture_output=True,
                             text=True, timeout=60)
        return out.returncode, out.stdout.strip()

    try:
        assert probe("m1flow.v1.SandboxService", own) == (0, "SERVING")  # its own certificate, not an allowed peer
        assert probe("m1flow.v1.SandboxService", None) == (1, "UNREACHABLE")  # plaintext: refused
        assert probe("m1flow.v1.NoSuchService", own) == (1, "UNREACHABLE")  # health answers NOT_FOUND
        health.set_serving(servicer, ["m1flow.v1.SandboxService"], False)
        assert probe("m1flow.v1.SandboxService", own) == (1, "NOT_SERVING")
    finally:
        server.stop(0)
