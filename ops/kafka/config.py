"""The local KRaft node's configuration: where it listens, its state file's fields, and the files
a start writes (server.properties, log4j2.yaml); a TLS node's listeners and ACL authoriser."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from m1flow.bus.limits import MESSAGE_MAX_BYTES


@dataclass
class BrokerState:
    port: int
    controller_port: int
    cluster_id: str
    pid: int = 0
    started_at: float = 0.0  # the process's create time: a pid alone may be reused, or not exec'd yet
    secrets: str = ""  # the CA folder of a TLS broker ('' plaintext): later tools find the admin identity

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


_LOG4J = """Configuration:
  name: m1flow-kafka
  Appenders:
    File:
      name: file
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        ref: file
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: WARN
      - name: state.change.logger
        level: WARN
"""


def write_config(run_dir: Path, state: BrokerState, secrets: Path | None) -> Path:
    """The node's server.properties and log4j2.yaml under run_dir; returns the properties' path."""
    data = run_dir / "data"
    logs = run_dir / "logs"
    data.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    (run_dir / "log4j2.yaml").write_text(_LOG4J.format(log=logs / "server.log"))
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{state.controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{state.port},CONTROLLER://127.0.0.1:{state.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{state.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data),
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "2",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.partitions": "1",
        "message.max.bytes": str(MESSAGE_MAX_BYTES),  # m1flow.bus.limits: the producers refuse above it
    }
    if secrets is not None:
        props.update(tls_props(secrets, state))
    path = run_dir / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def tls_props(secrets: Path, state: BrokerState) -> dict[str, str]:
    """Both listeners TLS with required client certificates; the certificate's CN is the
    principal (`User:reward`), authorised by the KRaft StandardAuthorizer, nothing allowed
    without an ACL. The node's own identity (`broker`, on the controller and inter-broker
    connections) and the operator's (`admin`) are super users."""
    from m1flow.security.pki import CertificateAuthority

    broker = CertificateAuthority(secrets).identity("broker")
    return {
        "listeners": f"SSL://127.0.0.1:{state.port},CONTROLLER://127.0.0.1:{state.controller_port}",
        "advertised.listeners": f"SSL://127.0.0.1:{state.port}",
        "inter.broker.listener.name": "SSL",
        "listener.security.protocol.map": "CONTROLLER:SSL,SSL:SSL",
        "ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(broker.bundle),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(broker.ca),
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:broker;User:admin",
    }
