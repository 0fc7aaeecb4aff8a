"""The compose mini-cluster in secure mode (`m1flow cluster up --secure`, docker-compose.secure.yml):
the credentials made once on the host, and the one-shot `kafka_init` container's work.

On the host, under the cluster's secrets folder (`ClusterConfig.secrets_dir`; default
`$M1FLOW_CACHE/docker/<project>-secrets`, mode 0700), made on the first secure `up` and reused after:

  ca/        the CA (`ca.pem`, `ca.key`) and every identity it issued, as m1flow/security/pki.py
             writes them; never mounted into a container (the host's operator tools read `admin` here)
  <name>/    one folder per principal, mounted read-only at /run/m1flow/identity in its container(s)
             only: `ca.pem`, `cert.pem`, `key.pem` (0600), and
               broker:  `bundle.pem` (key + certificate: the Java PEM keystore, 0600) and
                        `client.properties` (TLS settings of its health check; paths only)
               learner: `sign.key` (its Ed25519 announcement key, 0600)
               rollout, eval, source, monitor: `sign.pub` (the learner's public key: every consumer of
                        `policy` verifies each announcement with it before acting on it)

A container thus holds its own key and no other: a compromised reward container has the reward
principal's rights (ops/acls.py) and nothing else. The folders are copies of ca/ refreshed
on every `up`, so a CA made anew (ca/ deleted) reaches every container.

In the `kafka_init` container (`python -m ops.cluster_secure init`, as `admin`): the topics
(services have no CREATE right in secure mode) and the ACLs. (The `feed` profile runs the `m1flow` CLI,
which acts as the identity M1FLOW_SECURITY names.) `... secrets DIR` makes the folder for
a plain `docker compose -f docker-compose.yml -f docker-compose.secure.yml up`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from ops.services import NAMES
from m1flow.security.config import SecurityConfig, from_env
from m1flow.security.pki import CertificateAuthority, signing_key, write_private

MOUNT = "/run/m1flow/identity"  # where a container finds its own folder (docker-compose.secure.yml)
# Every principal with a folder: the services, the broker (its node identity, a super user) and
# admin (the operator: kafka_init, the feed profile; a super user).
PRINCIPALS: tuple[str, ...] = ("broker", "admin", *NAMES)
# Names other containers reach a server by (besides localhost and 127.0.0.1, which every
# certificate names): the broker is `kafka` inside the network and `localhost` from the host; the
# reward service calls the sandbox at `sandbox:50051`.
HOSTS: dict[str, tuple[str, ...]] = {"broker": ("kafka", "localhost"), "sandbox": ("sandbox",)}

CLIENT_PROPERTIES = f"""\
# The broker container's health check (kafka-broker-api-versions.sh --command-config): TLS with
# the broker's own certificate (paths only; the key stays in bundle.pem, 0600).
security.protocol=SSL
ssl.keystore.type=PEM
ssl.keystore.location={MOUNT}/bundle.pem
ssl.truststore.type=PEM
ssl.truststore.location={MOUNT}/ca.pem
"""


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


POLICY_CONSUMERS = ("rollout", "eval", "source", "monitor")  # the readers of `policy` (ops/acls.py)


def make_secrets(folder: str | Path) -> Path:
    """The CA, one identity per principal and the per-container folders under `folder` (made on
    first call; the CA and identities reused after). Returns the folder, resolved."""
    root = _private_dir(Path(folder).resolve())
    ca = CertificateAuthority(_private_dir(root / "ca"))
    sign_private, sign_public = signing_key(ca.folder, "learner")
    for name in PRINCIPALS:
        ident = ca.identity(name, HOSTS.get(name, ()))
        # Keys 0600, owned by the user running `m1flow cluster`: the services' image runs as root
        # (the Dockerfile names no USER), which reads them through the read-only mount; the broker
        # container runs as root too (docker-compose.secure.yml says why). Never world-readable.
        own = _private_dir(root / name)
        shutil.copyfile(ident.ca, own / "ca.pem")
        shutil.copyfile(ident.cert, own / "cert.pem")
        write_private(own / "key.pem", ident.key.read_bytes())
        if name == "broker":
            write_private(own / "bundle.pem", ident.bundle.read_bytes())
            (own / "client.properties").write_text(CLIENT_PROPERTIES)
        if name == "learner":
            write_private(own / "sign.key", sign_private.read_bytes())
        if name in POLICY_CONSUMERS:  # each acts on announcements: only on those the learner signed
            shutil.copyfile(sign_public, own / "sign.pub")
    return root


def identity(folder: str | Path, name: str) -> SecurityConfig:
    """Principal `name`'s block on the host (its folder's files), for the operator's tools and tests."""
    own = Path(folder).resolve() / name
    return SecurityConfig(enabled=True, ca_file=own / "ca.pem", cert_file=own / "cert.pem", key_file=own / "key.pem")


def _from_env() -> SecurityConfig:
    block = from_env()
    if not block.enabled:
        raise SystemExit("M1FLOW_SECURITY is not set: this runs in a container of docker-compose.secure.yml")
    return block


def init(bootstrap: str) -> None:
    """Topics (with M1FLOW_TOPICS's layout, as the services would in plaintext) and every service's ACLs."""
    from m1flow.bus.admin import ensure_topics
    from m1flow.bus.topics import TopicLayout
    from ops.acls import apply_acls

    admin = _from_env()
    layout = TopicLayout.model_validate_json(os.environ["M1FLOW_TOPICS"]) if os.environ.get("M1FLOW_TOPICS") else None
    created = ensure_topics(bootstrap, layout=layout, security=admin)
    count = apply_acls(bootstrap, admin)
    print(f"kafka_init: as {admin.principal}: {len(created)} topics created, {count} ACLs in place", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ops.cluster_secure", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="action", required=True)
    i = sub.add_parser("init", help="(kafka_init container) create the topics and the ACLs as admin")
    i.add_argument("--bootstrap", default="kafka:9092")
    s = sub.add_parser("secrets", help="make (or refresh) a secrets folder; prints M1FLOW_SECRETS_DIR=...")
    s.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    if args.action == "init":
        init(args.bootstrap)
        return 0
    print(f"M1FLOW_SECRETS_DIR={make_secrets(args.folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
