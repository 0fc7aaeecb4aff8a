"""gRPC mutual TLS over real sockets: a server refuses a client without a certificate (or with one
from another CA), health answers any principal of the run's CA, and a service that names its
allowed peers (the sandbox: `reward`) refuses every other principal with PERMISSION_DENIED."""
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


class Echo(grpc.GenericRpcHandler):
    """A real method on the server beside health: returns the caller's principal."""

    def service(self, details):  # noqa: ANN001, ANN201
        if details.method != "/test.Echo/Who":
            return None
        return grpc.unary_unary_rpc_method_handler(lambda req, ctx: grpc_tls.peer_name(ctx).encode(),
                                                   request_deserializer=bytes, response_serializer=bytes)


@pytest.fixture
def sandbox_like(tmp_path):
    server, port, servicer = health.grpc_server("127.0.0.1", 0, 2, block(tmp_path, "sandbox", grpc_allowed_peers=["reward"]))
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
