"""Typed service configuration from defaults, a file, the environment and flags (in that order).

Every knob has a default that works on a 2-core machine; `--config file.yaml`, `M1FLOW_<FIELD>`
environment variables and `--field value` flags override it, later sources winning. Components'
settings nest under their service's (`algorithm:` and `train:` of the learner, `math:`, `code:` and
`genrm:` of the reward service): a YAML file sets them as nested keys, a flag or variable as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, Field, field_validator

from m1flow.bus.liveness import LivenessConfig
from m1flow.bus.topics import TopicLayout
from m1flow.runtime.replica import container_replica
from m1flow.security.config import SecurityConfig
from m1flow.store_config import StoreConfig

T = TypeVar("T", bound="ServiceConfig")


class ServiceConfig(BaseModel):
    # Keys a service renamed: still read from files, M1FLOW_* variables and flags, for its own
    # validator to move where they now live.
    deprecated_keys: ClassVar[tuple[str, ...]] = ()

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    run_id: str = Field("local", description="Run id stamped on every event's trace")
    run_dir: Path = Field(Path("run"), description="Where checkpoints, readiness files and logs go")
    group_id: str = Field("", description="Consumer group; default m1flow-<service>")
    replica: int = Field(0, description="Replica index, for logs, client ids and readiness files; "
                                        "'auto': from the container's name (docker compose --scale)")
    ready_dir: Path | None = Field(None, description="where the readiness file goes; default run_dir/ready")
    grpc_host: str = Field("127.0.0.1", description="address gRPC binds (0.0.0.0 in containers)")
    grpc_port: int = Field(0, description="gRPC port; 0 picks a free one")
    grpc_workers: int = Field(4, description="threads serving gRPC calls (the sandbox's concurrent runs)")
    grpc_methods: dict[str, list[str]] = Field(
        default_factory=dict, description="who may call each gRPC method in secure mode: full method name -> "
        "principals (ops/acls.py's GRPC; M1FLOW_GRPC_METHODS in files/service.env); a method without a row answers "
        "no one")
    metrics_host: str = Field("127.0.0.1", description="address /metrics binds")
    metrics_port: int = Field(0, description="Prometheus /metrics port; 0 picks a free one; -1 disables")
    output_suffix: str = Field("", description="write outputs to '<topic>.<suffix>' (replays, debugging)")
    stop_offsets: dict[str, int] | None = Field(
        None, description="replay: stop at these offsets ('topic/partition' -> end) and exit")
    kafka_client: Literal["kafka-python", "confluent-kafka"] = Field(
        "confluent-kafka", description="the client consumers use (m1flow/bus/clients.py says why two)")
    liveness: LivenessConfig = Field(default_factory=LivenessConfig,
                                     description="when the consumer reports unhealthy (no progress, broker away)")
    log_level: str = "INFO"
    log_json: bool = True
    exit_unhealthy_after_s: float = Field(0.0, ge=0, description="exit, for the container engine to restart it, "
                                          "after this long unhealthy having been healthy; 0: never")
    stop_grace_s: float = Field(20.0, ge=0, description="after SIGTERM, exit this long later even if in-flight "
                                "work is not committed (it is replayed); below the pod's "
                                "terminationGracePeriodSeconds (30 s default) and compose's stop_grace_period; 0: wait")
    security: SecurityConfig = Field(default_factory=SecurityConfig,
                                     description="TLS identity for Kafka (off: plaintext, as on a laptop)")
    store: StoreConfig = Field(default_factory=StoreConfig,
                               description="how s3:// checkpoint URIs are reached (file:// needs nothing)")
    topics: TopicLayout = Field(default_factory=TopicLayout,
                                description="partitions per topic and replication factor of the topics it creates")

    @property
    def replaying(self) -> bool:
        """The one answer to "are we replaying": re-feeding a range (`m1flow replay` sets stop_offsets)
        or writing to '<topic>.<suffix>' copies, and so not a part of the live loop: the reward service
        keeps the settings it starts with, the learner starts at its group's offsets, the rollout
        service does not pace itself by the live consumers' lag."""
        return self.stop_offsets is not None or bool(self.output_suffix)

    @field_validator("replica", mode="before")
    @classmethod
    def _replica(cls, value: Any) -> Any:
        return container_replica() if value == "auto" else value

    @classmethod
    def load(cls: type[T], argv: list[str] | None = None, env: dict[str, str] | None = None) -> T:
        env = dict(os.environ if env is None else env)
        parser = argparse.ArgumentParser(description=cls.__doc__)
        parser.add_argument("--config", type=Path, help="YAML or JSON file with settings")
        for name, field in cls.model_fields.items():
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None,
                                help=f"{field.description or name} (default: {field.default})")
        for name in cls.deprecated_keys:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, help="deprecated")
        args = parser.parse_args(argv)
        values: dict[str, Any] = {}
        if args.config:
            text = args.config.read_text()
            values.update(json.loads(text) if args.config.suffix == ".json" else yaml.safe_load(text) or {})
        for name in (*cls.model_fields, *cls.deprecated_keys):
            env_value = env.get(f"M1FLOW_{name.upper()}")
            if env_value is not None:
                values[name] = _merge(values.get(name), _parse(env_value))
            flag = getattr(args, name)
            if flag is not None:
                values[name] = _merge(values.get(name), _parse(flag))
        return cls.model_validate(values)


def _merge(base: Any, override: Any) -> Any:
    """A nested block given as JSON (`--algorithm '{"policy_loss": "dapo"}'`) changes only the keys it
    names; the file's other keys in that block stay."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in override.items()}}
    return override


def _parse(text: str) -> Any:
    """Flags and env vars are strings; let JSON give lists, numbers and booleans their types."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text
