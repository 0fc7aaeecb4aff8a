"""The sandbox's gRPC client, callable like the local `Sandbox`: executor(ExecRequest) -> ExecResult,
and `run_tests(RunTestsRequest) -> RunTestsResult` like `svc_sandbox.swe.run_tests` on a Sandbox.

A transport failure is a sandbox_error result, never an exception that would turn into reward 0.
"""
from __future__ import annotations

import grpc

from m1flow.contracts import rpc_grpc
from svc_sandbox.limits import ExecRequest, ExecResult, ExecStatus
from svc_sandbox.swe import RunTestsRequest, RunTestsResult, swe_limits
from svc_sandbox.wire import (request_to_proto, result_from_proto, tests_request_to_proto,
                              tests_result_from_proto)

_MAX_MESSAGE = 64 * 1024 * 1024  # repository snapshots and test logs can be large; the server allows this


class SandboxClient:
    def __init__(self, address: str, timeout_margin_s: float = 30.0) -> None:
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", _MAX_MESSAGE), ("grpc.max_send_message_length", _MAX_MESSAGE)])
        self.stub = rpc_grpc.SandboxServiceStub(self.channel)
        self.margin = timeout_margin_s

    def __call__(self, request: ExecRequest) -> ExecResult:
        deadline = request.limits.wall_seconds + request.compile_limits.wall_seconds + self.margin
        try:
            return result_from_proto(self.stub.Execute(request_to_proto(request), timeout=deadline))
        except grpc.RpcError as exc:
            return ExecResult.sandbox_error(_why(exc))

    def run_tests(self, request: RunTestsRequest) -> RunTestsResult:
        """Apply the patch to the snapshot and run the tests in the service; statuses, not a grade."""
        deadline = (request.limits or swe_limits()).wall_seconds + self.margin
        try:
            return tests_result_from_proto(self.stub.RunTests(tests_request_to_proto(request), timeout=deadline))
        except grpc.RpcError as exc:
            return RunTestsResult(status=ExecStatus.SANDBOX_ERROR.value, detail=_why(exc))

    def close(self) -> None:
        self.channel.close()


def _why(exc: grpc.RpcError) -> str:
    return f"sandbox RPC failed: {exc.code().name} {exc.details()}"[:2000]
