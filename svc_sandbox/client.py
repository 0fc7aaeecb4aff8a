"""The sandbox's gRPC client, callable like the local `Sandbox`: executor(ExecRequest) -> ExecResult.

A transport failure is a sandbox_error result, never an exception that would turn into reward 0.
"""
from __future__ import annotations

import grpc

from m1flow.contracts import rpc_grpc
from svc_sandbox.limits import ExecRequest, ExecResult
from svc_sandbox.wire import request_to_proto, result_from_proto


class SandboxClient:
    def __init__(self, address: str, timeout_margin_s: float = 30.0) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = rpc_grpc.SandboxServiceStub(self.channel)
        self.margin = timeout_margin_s

    def __call__(self, request: ExecRequest) -> ExecResult:
        deadline = request.limits.wall_seconds + request.compile_limits.wall_seconds + self.margin
        try:
            return result_from_proto(self.stub.Execute(request_to_proto(request), timeout=deadline))
        except grpc.RpcError as exc:
            return ExecResult.sandbox_error(f"sandbox RPC failed: {exc.code().name} {exc.details()}")

    def close(self) -> None:
        self.channel.close()
