"""gRPC server with the standard grpc.health.v1 service, and Prometheus /metrics."""
from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY, start_http_server

from m1flow.kafka.broker import free_port


def grpc_server(host: str, port: int, workers: int = 4) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A started-later gRPC server bound to host:port (port 0: a free one) with health NOT_SERVING."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers),
                         options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                                  ("grpc.max_send_message_length", 64 * 1024 * 1024)])
    bound = server.add_insecure_port(f"{host}:{port}")
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


def check(address: str, timeout: float = 2.0) -> str:
    """The health status name of a server, or UNREACHABLE."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
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
