"""What other services use of svc_sandbox: the request/result types and the gRPC client.

`SandboxClient` is callable like the local `Sandbox` (executor(ExecRequest) -> ExecResult) and has
`run_tests(RunTestsRequest) -> RunTestsResult` like it, so a verifier takes either. Import from
here only; the rest of svc_sandbox is the service's own.

A transport failure is a SANDBOX_ERROR result, never an exception that would turn into reward 0.
A caller's mistake (INVALID_ARGUMENT) raises InvalidRequest: it is a bug in the task, not a
verdict on the program. A busy service (RESOURCE_EXHAUSTED) is asked again after a pause.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from m1flow.contracts import rpc_grpc
from m1flow.security import grpc_tls as tls
from m1flow.status import Status
from svc_sandbox.api import (DEFAULT_TEST_COMMAND, MB, Executor, ExecRequest, ExecResult, InvalidRequest, Limits, RunTestsRequest,
                             RunTestsResult, TestsRunner, swe_limits)
from svc_sandbox.languages import canonical_language, fence_tags
from m1flow.task_store import snapshot_tar
from svc_sandbox.wire import request_to_proto, result_from_proto, tests_request_to_proto, tests_result_from_proto

__all__ = ["DEFAULT_TEST_COMMAND", "MB", "Executor", "ExecRequest", "ExecResult", "InvalidRequest", "Limits", "RunTestsRequest",
           "RunTestsResult", "SandboxClient", "Status", "TestsRunner", "canonical_language", "fence_tags",
           "snapshot_tar", "swe_limits"]
_MAX_MESSAGE = 64 * 1024 * 1024  # repository snapshots and test logs can be large; the server allows this
T = TypeVar("T")


class SandboxClient:
    def __init__(self, address: str, timeout_margin_s: float = 30.0, busy_wait_s: float = 60.0) -> None:
        self.channel = tls.channel(address, options=[
            ("grpc.max_receive_message_length", _MAX_MESSAGE), ("grpc.max_send_message_length", _MAX_MESSAGE)])
        self.stub = rpc_grpc.SandboxServiceStub(self.channel)
        self.margin = timeout_margin_s
        self.busy_wait_s = busy_wait_s

    def __call__(self, request: ExecRequest) -> ExecResult:
        deadline = request.limits.wall_seconds + request.compile_limits.wall_seconds + self.margin
        message = request_to_proto(request)
        try:
            return result_from_proto(self._call(lambda: self.stub.Execute(message, timeout=deadline)))
        except grpc.RpcError as exc:
            return ExecResult.sandbox_error(_why(exc))

    def run_tests(self, request: RunTestsRequest) -> RunTestsResult:
        """Apply the patch to the snapshot and run the tests in the service; statuses, not a grade."""
        deadline = (request.limits or swe_limits()).wall_seconds + self.margin
        message = tests_request_to_proto(request)
        try:
            return tests_result_from_proto(self._call(lambda: self.stub.RunTests(message, timeout=deadline)))
        except grpc.RpcError as exc:
            return RunTestsResult(status=Status.SANDBOX_ERROR, detail=_why(exc))

    def _call(self, call: Callable[[], T]) -> T:
        """`call()`, again after a pause while the service is busy; InvalidRequest for our mistakes."""
        give_up, pause = time.monotonic() + self.busy_wait_s, 0.05
        while True:
            try:
                return call()
            except grpc.RpcError as exc:
                if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                    field, _, why = (exc.details() or "").partition(": ")
                    raise InvalidRequest(field, why) from None
                if exc.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() + pause > give_up:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def close(self) -> None:
        self.channel.close()


def _why(exc: grpc.RpcError) -> str:
    return f"sandbox RPC failed: {exc.code().name} {exc.details()}"[:2000]
