"""The one typed security block of a process (`ServiceConfig.security`, `M1FLOW_SECURITY`), and the
settings both Kafka clients take from it.

Off by default: a laptop's `m1flow up` and `make demo` talk plaintext to a loopback broker as
before. On (`m1flow up --secure`, the chart), every Kafka connection is TLS with this process's
certificate, which the broker maps to the principal `User:<CN>` and authorises by ACL.

A process has one identity, so the block is activated once at start-up (`activate`) and every
Kafka client the library builds reads it (`current`); a caller acting as another principal (the
operator's admin, a test) passes its own block explicitly. Only file paths are held here, never
key material, so dumping the config or logging it leaks nothing.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

GRPC_FILES = ("grpc_ca_file", "grpc_cert_file", "grpc_key_file")


class SecurityConfig(BaseModel):
    enabled: bool = Field(False, description="TLS with client certificates to Kafka (and the ACLs that follow)")
    ca_file: Path | None = Field(None, description="PEM of the CA every peer's certificate must chain to")
    cert_file: Path | None = Field(None, description="this process's certificate (PEM)")
    key_file: Path | None = Field(None, description="this process's private key (PEM, PKCS#8, mode 0600)")
    grpc_allowed_peers: list[str] = Field(default_factory=list, description="narrows every gRPC method to these "
                                          "principals too (older than the method table, ServiceConfig.grpc_methods, "
                                          "which says who may call what; this never widens a row)")
    grpc_tls: bool = Field(True, description="mutual TLS on gRPC too (off: plaintext gRPC, where only "
                           "NetworkPolicies guard it)")
    grpc_ca_file: Path | None = Field(None, description="the CA gRPC peers chain to, when it is not Kafka's "
                                      "(the chart: Strimzi's CA signs Kafka identities, the chart's own CA gRPC ones)")
    grpc_cert_file: Path | None = Field(None, description="this process's gRPC certificate (default: cert_file)")
    grpc_key_file: Path | None = Field(None, description="its key (default: key_file)")
    checkpoint_roots: list[str] = Field(default_factory=list, description="a replica loads policies only "
                                        "from under these URI prefixes: folders (paths or file://) or "
                                        "s3://bucket/prefix (empty: from anywhere, as on a laptop)")
    policy_signing_key: Path | None = Field(None, description="the learner's Ed25519 key it signs announcements with")
    policy_verify_key: Path | None = Field(None, description="the learner's public key; set: unsigned or "
                                           "wrongly signed announcements are refused")

    @field_validator("checkpoint_roots", mode="before")
    @classmethod
    def _roots_as_text(cls, value: Any) -> Any:
        """Paths are still accepted (a folder is a file:// root); they are kept as text, as URIs are."""
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else value

    @model_validator(mode="after")
    def _complete(self) -> "SecurityConfig":
        if self.enabled:
            missing = [n for n in ("ca_file", "cert_file", "key_file") if getattr(self, n) is None]
            if missing:
                raise ValueError(f"security.enabled needs {', '.join(missing)}")
            for name in ("ca_file", "cert_file", "key_file", *GRPC_FILES):
                path = getattr(self, name)
                if path is not None and not Path(path).is_file():
                    raise ValueError(f"security.{name}: no such file {path}")
            given = [n for n in GRPC_FILES if getattr(self, n) is not None]
            if given and len(given) != len(GRPC_FILES):
                raise ValueError(f"security: {', '.join(GRPC_FILES)} go together (given: {', '.join(given)})")
        return self

    def grpc_identity(self) -> tuple[Path, Path, Path]:
        """(CA, certificate, key) for gRPC: its own when given, else the Kafka identity's."""
        if self.grpc_ca_file is not None:
            return Path(self.grpc_ca_file), Path(self.grpc_cert_file), Path(self.grpc_key_file)
        return Path(self.ca_file), Path(self.cert_file), Path(self.key_file)

    @property
    def grpc_mtls(self) -> bool:
        """gRPC servers require, and clients present, certificates from the CA."""
        return self.enabled and self.grpc_tls

    @property
    def principal(self) -> str:
        """The CN of this process's certificate ('' when off): the name the broker authorises."""
        if not self.enabled:
            return ""
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        cert = x509.load_pem_x509_certificate(Path(self.cert_file).read_bytes())
        return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value

    def kafka_python(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's KafkaProducer/KafkaConsumer/KafkaAdminClient."""
        if not self.enabled:
            return {}
        return {"security_protocol": "SSL", "ssl_cafile": str(self.ca_file), "ssl_certfile": str(self.cert_file),
                "ssl_keyfile": str(self.key_file), "ssl_check_hostname": True}

    def confluent(self) -> dict[str, Any]:
        """Settings for confluent-kafka (librdkafka) clients."""
        if not self.enabled:
            return {}
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca_file),
                "ssl.certificate.location": str(self.cert_file), "ssl.key.location": str(self.key_file),
                "ssl.endpoint.identification.algorithm": "https"}


_active = SecurityConfig()


def from_env(environ: Mapping[str, str] = os.environ) -> SecurityConfig:
    """The block `M1FLOW_SECURITY` (JSON) gives, as a service's config reads it; off when unset. For
    processes that are not services: a probe in a service's container, an operator's CLI."""
    text = environ.get("M1FLOW_SECURITY", "").strip()
    return SecurityConfig.model_validate_json(text) if text else SecurityConfig()


def activate(block: SecurityConfig) -> None:
    """Make `block` this process's identity for every Kafka client built from now on."""
    global _active
    _active = block


def current(block: SecurityConfig | None = None) -> SecurityConfig:
    """`block` if given, else the process's active one (off unless activated)."""
    return block if block is not None else _active


def kafka_python(block: SecurityConfig | None = None) -> dict[str, Any]:
    return current(block).kafka_python()


def confluent(block: SecurityConfig | None = None) -> dict[str, Any]:
    return current(block).confluent()
