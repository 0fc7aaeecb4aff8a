"""Who may read the dashboard and Monitor.Report.

On loopback, as a laptop's `m1flow up` and the demo run it, whoever is on the machine may: nothing to
set up. Bound anywhere else (compose's 0.0.0.0 inside the container, a pod's address) any container on
that network could read the run's history and the version table, so a bearer token is then required:
given (`access_token`, or `access_token_file`, a Kubernetes Secret's mount), or else made once and
written to the run directory (mode 0600) for the operator to read. The token itself is never logged.
Monitor.Report over mutual TLS (`--secure`) takes the certificate as the identity instead.
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs

import grpc

log = logging.getLogger(__name__)
COOKIE = "m1flow_access"
TOKEN_FILE = "access_token"  # under the run directory, where one is made


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


class AccessToken:
    """A bearer token, compared in constant time."""

    def __init__(self, token: str) -> None:
        if len(token) < 16:
            raise ValueError("the monitor's access token is shorter than 16 characters")
        self._token = token

    def __repr__(self) -> str:
        return "AccessToken(**********)"

    def matches(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self._token.encode())

    @property
    def value(self) -> str:
        return self._token

    @classmethod
    def resolve(cls, token: str | None, token_file: Path | None, exposed: bool, run_dir: Path) -> AccessToken | None:
        """The token in force: the given one, the file's, or (exposed, none given) one made now."""
        if token:
            return cls(token)
        if token_file is not None:
            return cls(read_token(token_file))
        if not exposed:
            return None
        path = Path(run_dir) / TOKEN_FILE
        if path.exists():  # a restart keeps the token the operator already has
            return cls(read_token(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        log.info("the dashboard and Monitor.Report listen beyond loopback: they require the token now "
                 "in %s", path)
        return cls(read_token(path))


def read_token(path: Path) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the monitor's access token file {path}: {exc.strerror}") from None
    if not token:
        raise ValueError(f"the monitor's access token file {path} is empty")
    return token


def token_from_http(headers, query: str) -> tuple[str | None, bool]:  # noqa: ANN001 - http.client.HTTPMessage
    """The token a request presents, and whether it came in the URL (the page then sets the cookie and
    sends the browser on without it, so the token stays out of its history)."""
    auth = bearer(headers.get("Authorization", ""))
    if auth is not None:
        return auth, False
    in_url = parse_qs(query).get("token")
    if in_url:
        return in_url[0], True
    try:
        cookie = SimpleCookie(headers.get("Cookie", ""))
    except CookieError:
        return None, False
    return (cookie[COOKIE].value, False) if COOKIE in cookie else (None, False)


def cookie_header(token: AccessToken) -> str:
    return f"{COOKIE}={token.value}; Path=/; HttpOnly; SameSite=Strict"


def token_from_grpc(context: grpc.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata():
        if key == "authorization" and (token := bearer(value)) is not None:
            return token
    return None


def bearer(value: str) -> str | None:
    """The token of an `authorization: Bearer <token>` value (HTTP header or gRPC metadata)."""
    return value[len("Bearer "):].strip() if value.startswith("Bearer ") else None


def client_metadata(token: str | None = None) -> tuple[tuple[str, str], ...]:
    """What a Monitor.Report caller sends: the given token, or $M1FLOW_ACCESS_TOKEN, or the file named
    by $M1FLOW_ACCESS_TOKEN_FILE; none: nothing (a loopback or mTLS monitor needs none)."""
    token = token or os.environ.get("M1FLOW_ACCESS_TOKEN")
    if not token and os.environ.get("M1FLOW_ACCESS_TOKEN_FILE"):
        token = read_token(Path(os.environ["M1FLOW_ACCESS_TOKEN_FILE"]))
    return (("authorization", f"Bearer {token}"),) if token else ()
