"""What every svc_* process does around its own logic: config, logs, topics, gRPC with health,
/metrics, signal handling and a readiness file that launchers wait on."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from collections.abc import Callable
from typing import Any, ClassVar

import grpc
from pydantic import ValidationError

from m1flow.bus.admin import ensure_topics
from m1flow.bus.liveness import Health
from m1flow.bus.worker import Handler, StreamWorker
from m1flow.runtime import health, logs
from m1flow.runtime.config import ServiceConfig
from m1flow.runtime.stop_bound import StopBound
from m1flow.runtime.stuck_exit import StuckExit
from m1flow.security import config as security

log = logging.getLogger(__name__)


class Service(ABC):
    name: ClassVar[str]
    Config: ClassVar[type[ServiceConfig]] = ServiceConfig
    uses_kafka: ClassVar[bool] = True

    def __init_subclass__(cls, name: str | None = None, config: type[ServiceConfig] | None = None,
                          **kwargs: Any) -> None:
        """`class RewardService(Service, name="reward", config=RewardConfig)`: what a service is called
        (its group, its ready file, `m1flow svc NAME`) and the settings it loads, in its one line."""
        super().__init_subclass__(**kwargs)
        if name is not None:
            cls.name = name
        if config is not None:
            cls.Config = config

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.stop = threading.Event()
        self.on_health: Callable[[Health], None] = lambda health: None  # set by main()

    @property
    def group_id(self) -> str:
        return self.config.group_id or f"m1flow-{self.name}"

    def register(self, server: grpc.Server) -> list[str]:
        """Add this service's gRPC servicers; return their full names for health checking."""
        return []

    @abstractmethod
    def start(self) -> None:
        """Connect to Kafka and build state; after it returns the service reports SERVING."""

    def worker(self, handler: "Handler", **kwargs: Any) -> StreamWorker:
        """A StreamWorker for this service honouring the replay/redirect settings."""
        kwargs.setdefault("client_id", f"{self.name}-{self.config.replica}")
        return StreamWorker(self.config.bootstrap, self.group_id, handler, self.name,
                            stop_offsets=self.config.stop_offsets, output_suffix=self.config.output_suffix,
                            liveness=self.config.liveness, on_health=lambda verdict: self.on_health(verdict),
                            client=self.config.kafka_client,
                            **kwargs)

    def loop(self) -> None:
        """Run the stream worker until stopped (or, replaying, until the range is done)."""
        self.stream.run(self.stop)

    def shutdown(self) -> None:
        """Finish or hand back in-flight work, commit, close."""


def ready_file(run_dir: Path, name: str, replica: int, ready_dir: Path | None = None) -> Path:
    return Path(ready_dir or Path(run_dir) / "ready") / f"{name}-{replica}.json"


def main(cls: type[Service], argv: list[str] | None = None) -> None:
    """Run one service process: NOT_SERVING until it can do its work, then as its liveness says."""
    try:
        config = cls.Config.load(argv)
    except ValidationError as exc:  # a bad setting is the operator's to fix: say which, not a traceback
        errors = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise SystemExit(f"svc_{cls.name}: invalid settings: {errors}") from None
    logs.setup(cls.name, config.replica, config.log_level, config.log_json)
    service = cls(config)
    StopBound(config.stop_grace_s).install(service.stop.set)
    security.activate(config.security)
    if cls.uses_kafka and not config.security.enabled:  # secure: topics are the operator's (no CREATE right)
        ensure_topics(config.bootstrap, suffix=config.output_suffix, layout=config.topics)
    server, grpc_port, health_servicer = health.grpc_server(config.grpc_host, config.grpc_port,
                                                            config.grpc_workers, config.security, config.grpc_methods)
    names = service.register(server)
    service.on_health = lambda verdict: health.set_serving(health_servicer, names, verdict.healthy)
    server.start()
    metrics_port = health.metrics_server(config.metrics_host, config.metrics_port)
    service.start()
    if not hasattr(service, "stream"):  # no consumer: ready once started
        health.set_serving(health_servicer, names, True)
    elif config.exit_unhealthy_after_s:
        StuckExit(lambda: service.stream.liveness.health, config.exit_unhealthy_after_s).start()
    ready = ready_file(config.run_dir, cls.name, config.replica, config.ready_dir)
    ready.parent.mkdir(parents=True, exist_ok=True)
    tmp = ready.with_suffix(".tmp")
    address = "127.0.0.1" if config.grpc_host in ("0.0.0.0", "::") else config.grpc_host
    tmp.write_text(json.dumps({"pid": os.getpid(), "grpc": f"{address}:{grpc_port}",
                               "metrics_port": metrics_port, "started": time.time()}))
    tmp.replace(ready)
    log.info("started: grpc 127.0.0.1:%s metrics %s group %s", grpc_port, metrics_port, service.group_id)
    try:
        service.loop()
    finally:
        service.on_health = lambda verdict: None
        health.set_serving(health_servicer, names, False)
        try:
            service.shutdown()
        finally:
            server.stop(grace=2)
            ready.unlink(missing_ok=True)
            log.info("stopped")
