"""svc_sandbox: a gRPC service that runs untrusted code under hard limits (no Kafka)."""
from __future__ import annotations

import grpc
from pydantic import Field

from m1flow.contracts import rpc, rpc_grpc
from m1flow.runtime.config import ServiceConfig
from m1flow.runtime.service import Service
from svc_sandbox.backend import Sandbox, choose_backend
from svc_sandbox.swe import run_tests
from svc_sandbox.wire import (request_from_proto, result_to_proto, tests_request_from_proto,
                              tests_result_to_proto)


class SandboxConfig(ServiceConfig):
    """svc_sandbox: Docker where an engine answers, else the local bubblewrap jail."""

    backend: str = Field("auto", description="auto, docker or jail")


class SandboxGrpc(rpc_grpc.SandboxServiceServicer):
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def Execute(self, request: rpc.ExecuteRequest, context: grpc.ServicerContext) -> rpc.ExecuteReply:  # noqa: N802
        try:
            req = request_from_proto(request)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return result_to_proto(self.sandbox.execute(req))

    def RunTests(self, request: rpc.RunTestsRequest, context: grpc.ServicerContext) -> rpc.RunTestsReply:  # noqa: N802
        """Patch the snapshot and run its tests in one sandboxed run; the caller grades the statuses."""
        try:
            req = tests_request_from_proto(request)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return tests_result_to_proto(run_tests(self.sandbox, req))


class SandboxService(Service):
    name = "sandbox"
    Config = SandboxConfig
    uses_kafka = False

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        self.sandbox = Sandbox(choose_backend(config.backend))

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_SandboxServiceServicer_to_server(SandboxGrpc(self.sandbox), server)
        return ["m1flow.v1.SandboxService"]

    def start(self) -> None:
        pass

    def loop(self) -> None:
        self.stop.wait()
