"""gRPC server with the standard grpc.health.v1 service, and Prometheus /metrics."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY, start_http_server

from m1flow.runtime.ports import free_port
from m1flow.security.config import SecurityConfig, current
from m1flow.security.grpc_tls import MethodAccess, add_port, channel


def grpc_server(host: str, port: int, workers: int = 4, security: SecurityConfig | None = None,
                methods: Mapping[str, Sequence[str]] | None = None) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A started-later gRPC server bound to host:port (port 0: a free one) with health NOT_SERVING;
    mutual TLS when security is on, and then each method only for the principals its row of
    `methods` names (none: no method answers anyone; health answers every principal of the CA)."""
    block = current(security)
    interceptors = [MethodAccess(methods or {}, block.grpc_allowed_peers)] if block.grpc_mtls else []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), interceptors=interceptors,
                         options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                                  ("grpc.max_send_message_length", 64 * 1024 * 1024)])
    bound = add_port(server, f"{host}:{port}", block)
    if bound == 0:
        raise RuntimeError(f"cannot bind gRPC port {port}")
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return server, bound, servicer


def set_serving(servicer: health.HealthServicer, names: list[str], serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ["", *names]:
        servicer.set(name, status)


def check(address: str, timeout: float = 2.0, security: SecurityConfig | None = None, service: str = "") -> str:
    """The health status name of a server (or of one of its `service`s), or UNREACHABLE (a TLS server
    refuses a probe without a certificate)."""
    with channel(address, security=security) as channel_:
        stub = health_pb2_grpc.HealthStub(channel_)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError:
            return "UNREACHABLE"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def metrics_server(host: str, port: int) -> int:
    """Serve Prometheus metrics; returns the port (-1 when disabled)."""
    if port < 0:
        return -1
    port = port or free_port()
    start_http_server(port, addr=host, registry=REGISTRY)
    return port
