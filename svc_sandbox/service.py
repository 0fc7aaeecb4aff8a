"""svc_sandbox: a gRPC service that runs untrusted code under hard limits (no Kafka).

Every request is checked at the edge (svc_sandbox.validate); a caller's mistake is
INVALID_ARGUMENT naming the field. Runs go through a bounded queue (RESOURCE_EXHAUSTED when
full), and a run whose caller cancels or whose deadline passes is killed at once.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc
from pydantic import Field, model_validator

from m1flow.contracts import rpc, rpc_grpc
from m1flow.data.swe_env import EnvCache
from m1flow.runtime.config import ServiceConfig
from m1flow.runtime.service import Service
from svc_sandbox.admission import QueueFull, RunQueue
from svc_sandbox.api import InvalidRequest
from svc_sandbox.backends import BackendKind, choose_backend
from svc_sandbox.backends.base import Cancel
from svc_sandbox.backends.docker import DockerConfig
from svc_sandbox.backends.jail import JailConfig
from svc_sandbox.sandbox import Sandbox
from svc_sandbox.validate import RequestCaps, request_from_proto, tests_request_from_proto
from svc_sandbox.wire import result_to_proto, tests_result_to_proto

T = TypeVar("T")


class SandboxConfig(ServiceConfig):
    """svc_sandbox: Docker where an engine answers and the run image exists, else the local jail."""

    backend: BackendKind = Field("auto", description="auto, docker or jail")
    max_running: int = Field(2, ge=1, description="runs at once (one per core suits a 2-core machine)")
    max_waiting: int = Field(8, ge=0, description="calls that may wait for a run slot; more: RESOURCE_EXHAUSTED")
    caps: RequestCaps = Field(default_factory=RequestCaps, description="the most a request may ask for")
    jail: JailConfig = Field(default_factory=JailConfig, description="the local bubblewrap jail")
    docker: DockerConfig = Field(default_factory=DockerConfig, description="the Docker backend")
    swe_envs: Path | None = Field(None, description="the repository environments SWE tasks name (m1flow data "
                                                    "swe-make --envs), mounted read-only where their tests run")

    @model_validator(mode="after")
    def _threads_cover_the_queue(self) -> SandboxConfig:
        """Every running or waiting call holds a gRPC thread; two more keep health checks answered.

        Fewer threads would let calls wait inside gRPC, where no RESOURCE_EXHAUSTED is ever sent.
        """
        self.caps.check_defaults()
        self.grpc_workers = max(self.grpc_workers, self.max_running + self.max_waiting + 2)
        return self


class SandboxGrpc(rpc_grpc.SandboxServiceServicer):
    def __init__(self, sandbox: Sandbox, config: SandboxConfig) -> None:
        self.sandbox = sandbox
        self.caps = config.caps
        self.queue = RunQueue(config.max_running, config.max_waiting)

    def Execute(self, request: rpc.ExecuteRequest, context: grpc.ServicerContext) -> rpc.ExecuteReply:  # noqa: N802
        req = _checked(context, lambda: request_from_proto(request, self.caps))
        return result_to_proto(self._run(context, lambda cancel: self.sandbox.execute(req, cancel)))

    def RunTests(self, request: rpc.RunTestsRequest, context: grpc.ServicerContext) -> rpc.RunTestsReply:  # noqa: N802
        """Patch the snapshot and run its tests in one sandboxed run; the caller grades the statuses."""
        req = _checked(context, lambda: tests_request_from_proto(request, self.caps))
        return tests_result_to_proto(self._run(context, lambda cancel: self.sandbox.run_tests(req, cancel)))

    def _run(self, context: grpc.ServicerContext, work: Callable[[Cancel], T]) -> T:
        """Run `work` in a queue slot; it is told to stop as soon as the call ends on the caller's side."""
        cancel = Cancel()
        context.add_callback(cancel.set)  # fires when the call ends: cancelled, deadline passed, or answered
        try:
            with self.queue.slot(cancel) as got:
                if not got:
                    context.abort(grpc.StatusCode.CANCELLED, "the caller stopped waiting before the run started")
                return _checked(context, lambda: work(cancel))
        except QueueFull as err:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))


def _checked(context: grpc.ServicerContext, make: Callable[[], T]) -> T:
    """`make()`, with the caller's mistakes answered as INVALID_ARGUMENT ('field: why')."""
    try:
        return make()
    except InvalidRequest as err:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))


class SandboxService(Service, name="sandbox", config=SandboxConfig):
    uses_kafka = False

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        envs = EnvCache(config.swe_envs.resolve()) if config.swe_envs else None
        self.sandbox = Sandbox(choose_backend(config.backend, config.jail, config.docker), envs=envs)

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_SandboxServiceServicer_to_server(SandboxGrpc(self.sandbox, self.config), server)
        return ["m1flow.v1.SandboxService"]

    def start(self) -> None:
        pass

    def loop(self) -> None:
        self.stop.wait()
