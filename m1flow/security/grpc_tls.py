"""gRPC with mutual TLS from the same identities as Kafka: servers require a client certificate
from the run's CA, and each method answers only the principals (certificate CNs) its row of the
method table names (`ServiceConfig.grpc_methods`, ops/acls.py's GRPC: the sandbox only `reward`,
the others only the operator), enforced here by one interceptor, MethodAccess. A method without a
row answers no one: a table that was not handed over fails closed.

Health checks stay on the same port and need a valid certificate too (any principal of the CA):
the probe presents one (`m1flow up` uses the admin identity; in Kubernetes an exec probe with
grpc_health_probe's -tls-client-cert). A second, plaintext health port was the alternative; it
would be one more unauthenticated listener, and the kubelet probes the pod's address, not its
loopback, so it would not spare the chart the certificate either.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from m1flow.security.config import SecurityConfig, current

HEALTH_PREFIX = "/grpc.health.v1.Health/"


def channel(address: str, options: list[tuple[str, Any]] | None = None,
            security: SecurityConfig | None = None) -> grpc.Channel:
    """A channel to `address`: TLS with this process's certificate when security is on, else plaintext."""
    block = current(security)
    if not block.grpc_mtls:
        return grpc.insecure_channel(address, options=options)
    ca, cert, key = block.grpc_identity()
    creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes(), private_key=key.read_bytes(),
                                         certificate_chain=cert.read_bytes())
    return grpc.secure_channel(address, creds, options=options)


def add_port(server: grpc.Server, address: str, security: SecurityConfig | None = None) -> int:
    """Bind `address`: mutual TLS (a client certificate from the CA required) when security is on."""
    block = current(security)
    if not block.grpc_mtls:
        return server.add_insecure_port(address)
    ca, cert, key = block.grpc_identity()
    creds = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())], root_certificates=ca.read_bytes(),
                                        require_client_auth=True)
    return server.add_secure_port(address, creds)


def peer_name(context: grpc.ServicerContext) -> str:
    """The CN of the calling peer's verified certificate ('' over plaintext)."""
    names = context.auth_context().get("x509_common_name") or [b""]
    return names[0].decode()


class MethodAccess(grpc.ServerInterceptor):
    """The one authorization of a secure gRPC server: each method answers only the principals its
    row of `table` (full method name -> principals) names; health answers any peer the TLS handshake
    admitted (probes present the container's own certificate). `only`, when given (the older
    `security.grpc_allowed_peers`), narrows every row further; it never widens one."""

    def __init__(self, table: Mapping[str, Sequence[str]], only: Sequence[str] = ()) -> None:
        narrow = frozenset(only)
        self.table = {method: frozenset(p for p in who if not narrow or p in narrow) for method, who in table.items()}

    def intercept_service(self, continuation: Callable, details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None or details.method.startswith(HEALTH_PREFIX):
            return handler
        return _guarded(handler, self._check(details.method))

    def _check(self, method: str) -> Callable[[grpc.ServicerContext], None]:
        allowed = self.table.get(method)

        def check(context: grpc.ServicerContext) -> None:
            who = peer_name(context)
            if allowed is None:
                context.abort(grpc.StatusCode.PERMISSION_DENIED,
                              f"{method} has no row in the gRPC method table (grpc_methods): no principal may call it")
            if who not in allowed:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, f"principal {who or '(none)'!r} may not call {method}")
        return check


def _guarded(handler: grpc.RpcMethodHandler, check: Callable[[grpc.ServicerContext], None]) -> grpc.RpcMethodHandler:
    def wrap(behavior: Callable) -> Callable:
        def inner(request: Any, context: grpc.ServicerContext) -> Any:
            check(context)
            return behavior(request, context)
        return inner

    kinds = (("unary_unary", grpc.unary_unary_rpc_method_handler),
             ("unary_stream", grpc.unary_stream_rpc_method_handler),
             ("stream_unary", grpc.stream_unary_rpc_method_handler),
             ("stream_stream", grpc.stream_stream_rpc_method_handler))
    for attr, make in kinds:
        behavior = getattr(handler, attr)
        if behavior is not None:
            return make(wrap(behavior), request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
    return handler
