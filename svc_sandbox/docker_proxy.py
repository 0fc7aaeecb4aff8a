"""A narrow Docker API proxy: what svc_sandbox's Docker backend needs, and nothing that gives root.

Why: whoever can talk to the engine's socket can start a privileged container that mounts the
host's root, so mounting the socket into svc_sandbox gives that container root on the host. This
proxy holds the socket instead and lets through only the calls the backend makes (ping, version,
inspect of an allowed image, create / attach / start / kill / wait / inspect / stats / remove of run
containers), refuses a create body that asks for privileges, host paths, devices, host namespaces,
added capabilities, a relaxed security profile, a network, or an image outside the allow-list,
and lets a client touch only the containers it created through the proxy. The one host path a run
may see is a repository environment: a read-only bind of a folder directly under an allowed root
(`--allow-env-root`), at its own path.

One request per connection (the proxy asks the engine to close after answering), so every
request is parsed and checked; attach streams (HTTP upgrade) are relayed both ways as they are.

    python -m svc_sandbox.docker_proxy --listen tcp://0.0.0.0:2375 \
        --engine unix:///var/run/docker.sock --allow-image m1flow-sandbox:latest
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import socket
import socketserver
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

log = logging.getLogger("m1flow.docker_proxy")
_MAX_HEAD = 64 * 1024
_MAX_BODY = 1 << 20
_CHUNK = 1 << 16
_VERSION = re.compile(r"^/v\d+\.\d+(?=/)")
_CONTAINER_OP = re.compile(r"^/containers/([0-9a-f]{64})(?:/(attach|start|kill|wait|json|stats))?$")
_IMAGE_INSPECT = re.compile(r"^/images/(.+)/json$")
_ROOT_USERS = {"", "0", "root"}

# Create-body fields a run may set (any value), beyond those checked one by one below.
_FREE_CONFIG = {"Cmd", "Env", "WorkingDir", "AttachStdin", "AttachStdout", "AttachStderr", "OpenStdin",
                "StdinOnce", "Tty", "NetworkDisabled", "StopSignal", "StopTimeout", "Hostname", "Domainname",
                "Entrypoint", "ArgsEscaped"}
_FREE_HOST = {"Memory", "MemorySwap", "MemoryReservation", "NanoCpus", "CpuQuota", "CpuPeriod", "CpuShares",
              "Ulimits", "Init", "Tmpfs", "AutoRemove", "KernelMemory", "MemorySwappiness"}


class Refused(Exception):
    """A request the proxy does not forward; the message says why."""


def _must(condition: bool, why: str) -> None:
    if not condition:
        raise Refused(why)


def _unset(value: object) -> bool:
    """null, false or "": what a client sends for a field it leaves alone. An empty list is not:
    `MaskedPaths: []` would unmask /proc."""
    return value is None or value is False or value == ""


def _check_binds(binds: object, env_roots: Iterable[str]) -> None:
    """Each bind is `DIR:DIR:ro` with DIR a plain folder name directly under an allowed root."""
    roots = [os.path.normpath(r) for r in env_roots]
    _must(isinstance(binds, list) and bool(roots), "host paths are not allowed (no --allow-env-root)")
    for bind in binds:
        parts = str(bind).split(":")
        _must(len(parts) == 3 and parts[0] == parts[1] and parts[2] == "ro",
              f"bind {bind!r}: only a read-only bind of an environment at its own path")
        path = parts[0]
        _must(os.path.isabs(path) and os.path.normpath(path) == path and os.path.dirname(path) in roots
              and not os.path.basename(path).startswith("."),
              f"bind {bind!r}: not an environment directly under an allowed root")


def check_create(body: dict, images: Iterable[str], label: str, env_roots: Iterable[str] = ()) -> None:
    """Refused unless the create body is a locked-down run container of an allowed image (with at most
    read-only binds of environments under `env_roots`)."""
    _must(body.get("Image") in set(images), f"image {body.get('Image')!r} is not allowed")
    user = str(body.get("User") or "")
    _must(not ({user.split(":")[0]} | set(user.split(":")[1:2])) & _ROOT_USERS, f"user {user!r}: runs must not be root")
    _must(label in (body.get("Labels") or {}), f"the run container must carry the {label!r} label")
    host = body.get("HostConfig") or {}
    binds = [] if _unset(host.get("Binds")) else host["Binds"]
    if binds:
        _check_binds(binds, env_roots)
    volumes = body.get("Volumes")  # the SDK names each bind's target here too: nothing else may be
    _must(_unset(volumes) or (isinstance(volumes, dict) and
                              set(volumes) <= {str(b).split(":")[1] for b in binds} and not any(volumes.values())),
          "Volumes is not allowed beyond the environments bound")
    for key, value in body.items():
        _must(key in _FREE_CONFIG | {"Image", "User", "Labels", "HostConfig", "Volumes"} or _unset(value),
              f"{key} is not allowed")
    _must(host.get("NetworkMode") == "none", f"NetworkMode {host.get('NetworkMode')!r}: runs have no network")
    _must(host.get("ReadonlyRootfs") is True, "ReadonlyRootfs must be true")
    _must("ALL" in (host.get("CapDrop") or []), "CapDrop must hold ALL")
    _must((host.get("Memory") or 0) > 0 and (host.get("PidsLimit") or 0) > 0, "Memory and PidsLimit must be set")
    options = host.get("SecurityOpt") or []
    _must(all(opt in ("no-new-privileges", "no-new-privileges:true") for opt in options) and options,
          f"SecurityOpt {options!r}: only no-new-privileges, and it must be there")
    _must(host.get("IpcMode", "") in ("", "none", "private"), f"IpcMode {host.get('IpcMode')!r} is not allowed")
    for key, value in host.items():
        _must(key in _FREE_HOST | {"NetworkMode", "ReadonlyRootfs", "CapDrop", "SecurityOpt", "IpcMode",
                                   "PidsLimit", "Binds"} or _unset(value),
              f"HostConfig.{key} is not allowed" + (" (privileged)" if key == "Privileged" else ""))


@dataclass
class Policy:
    """What goes through: allowed images, and the containers created through this proxy."""
    images: frozenset[str]
    label: str = "m1flow.sandbox"
    env_roots: frozenset[str] = frozenset()  # folders whose environments runs may bind read-only
    max_containers: int = 4096
    created: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def route(self, method: str, path: str) -> str:
        """The kind of call ('create', 'remove', ...) or Refused; `path` without its query."""
        path = _VERSION.sub("", path)
        if (method, path) in {("GET", "/_ping"), ("HEAD", "/_ping"), ("GET", "/version")}:
            return "info"
        if method == "POST" and path == "/containers/create":
            return "create"
        image = _IMAGE_INSPECT.match(path)
        if method == "GET" and image:
            _must(unquote(image.group(1)) in self.images, f"image {unquote(image.group(1))!r} is not allowed")
            return "info"
        op = _CONTAINER_OP.match(path)
        _must(op is not None, f"{method} {path} is not a call the sandbox makes")
        with self.lock:
            _must(op.group(1) in self.created, "that container was not created through this proxy")
        verb = op.group(2)
        allowed = {None: "DELETE", "json": "GET", "stats": "GET"}.get(verb, "POST")
        _must(method == allowed, f"{method} {path} is not a call the sandbox makes")
        return "remove" if verb is None else "container"

    def created_one(self, container_id: str) -> None:
        with self.lock:
            _must(len(self.created) < self.max_containers, "too many run containers alive")
            self.created.add(container_id)

    def removed(self, container_id: str) -> None:
        with self.lock:
            self.created.discard(container_id)


@dataclass
class _Request:
    method: str
    target: str
    head: bytes  # request line and headers, as received
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def upgrade(self) -> bool:
        return "upgrade" in self.headers.get("connection", "").lower()


def _read_request(conn: socket.socket) -> _Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(_CHUNK)
        if not chunk:
            return None
        data += chunk
        _must(len(data) <= _MAX_HEAD, "request head too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    _must(len(parts) == 3, "malformed request line")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    _must("transfer-encoding" not in headers, "only Content-Length request bodies are accepted")
    length = int(headers.get("content-length", "0") or 0)
    _must(0 <= length <= _MAX_BODY, "request body too large")
    while len(rest) < length:
        chunk = conn.recv(min(_CHUNK, length - len(rest)))
        _must(bool(chunk), "request body cut short")
        rest += chunk
    return _Request(parts[0], parts[1], head, headers, rest[:length])


def _forwarded_head(request: _Request) -> bytes:
    """The head as sent on, asking the engine to close after the answer (unless it is an upgrade)."""
    lines = request.head.decode("latin-1").split("\r\n")
    kept = [line for line in lines[1:] if line.split(":")[0].strip().lower() not in ("connection", "keep-alive")]
    connection = [f"Connection: {request.headers['connection']}"] if request.upgrade else ["Connection: close"]
    return ("\r\n".join([lines[0], *kept, *connection]) + "\r\n\r\n").encode("latin-1")


def _split_response(raw: bytes) -> tuple[int, bytes]:
    """(status code, body with any chunked encoding undone) of a whole HTTP response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return status, body


def _answer(conn: socket.socket, code: int, reason: str, message: str) -> None:
    body = json.dumps({"message": message}).encode()
    conn.sendall(f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def _refuse(conn: socket.socket, why: str) -> None:
    _answer(conn, 403, "Forbidden", f"m1flow docker proxy refused: {why}")


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy until src ends, then end dst's writing side (the other direction may go on)."""
    try:
        while chunk := src.recv(_CHUNK):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class _Handler(socketserver.BaseRequestHandler):
    server: _Proxy

    def handle(self) -> None:
        conn: socket.socket = self.request
        try:
            request = _read_request(conn)
            if request is None:
                return
            kind = self.server.policy.route(request.method, request.path)
            if kind == "create":
                try:
                    body = json.loads(request.body or b"{}")
                except ValueError:
                    raise Refused("create body is not JSON") from None
                check_create(body, self.server.policy.images, self.server.policy.label, self.server.policy.env_roots)
        except Refused as why:
            log.warning("refused: %s", why)
            _refuse(conn, str(why))
            return
        except (OSError, ValueError) as err:
            log.warning("bad request: %s", err)
            return
        try:
            engine = self.server.connect_engine()
        except OSError as err:
            _answer(conn, 502, "Bad Gateway", f"engine unreachable: {err}")
            return
        with engine:
            engine.sendall(_forwarded_head(request) + request.body)
            if kind in ("create", "remove"):
                self._bookkeep(kind, request, engine, conn)
            elif request.upgrade:
                upstream = threading.Thread(target=_pipe, args=(conn, engine), daemon=True)
                upstream.start()
                _pipe(engine, conn)
                try:
                    conn.shutdown(socket.SHUT_RDWR)  # wakes the other direction if the client still holds on
                except OSError:
                    pass
                upstream.join()
            else:
                _pipe(engine, conn)

    def _bookkeep(self, kind: str, request: _Request, engine: socket.socket, conn: socket.socket) -> None:
        """Read the whole answer, note the container created or removed, pass the answer on."""
        raw = b""
        while chunk := engine.recv(_CHUNK):
            raw += chunk
        status, body = _split_response(raw)
        policy = self.server.policy
        if kind == "create" and status == 201:
            try:
                policy.created_one(json.loads(body)["Id"])
            except Refused as why:
                _refuse(conn, str(why))
                return
        elif kind == "remove" and status in (204, 404):
            policy.removed(_CONTAINER_OP.match(_VERSION.sub("", request.path)).group(1))
        conn.sendall(raw)


class _Proxy:
    """What both server kinds add: the policy and the way to the engine."""
    daemon_threads = True
    policy: Policy
    engine: str

    def connect_engine(self) -> socket.socket:
        url = urlsplit(self.engine)
        if url.scheme == "unix":
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                engine.connect(url.path)
            except OSError:
                engine.close()
                raise
            return engine
        return socket.create_connection((url.hostname, url.port or 2375))


class _TcpServer(_Proxy, socketserver.ThreadingTCPServer):
    allow_reuse_address = True

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"tcp://{host}:{port}"


class _UnixServer(_Proxy, socketserver.ThreadingUnixStreamServer):
    @property
    def url(self) -> str:
        return f"unix://{self.server_address}"


def serve(listen: str, engine: str, images: Iterable[str], label: str = "m1flow.sandbox",
          env_roots: Iterable[str] = ()) -> _Proxy:
    """A started proxy (serving on a thread of its own); `.shutdown()` then `.server_close()` stop it."""
    url = urlsplit(listen)
    if url.scheme == "unix":
        if os.path.exists(url.path):
            os.unlink(url.path)
        server: _Proxy = _UnixServer(url.path, _Handler)
        os.chmod(url.path, 0o660)
    else:
        server = _TcpServer((url.hostname or "127.0.0.1", url.port or 0), _Handler)
    server.policy, server.engine = Policy(frozenset(images), label, frozenset(env_roots)), engine
    threading.Thread(target=server.serve_forever, daemon=True, name="docker-proxy").start()
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Docker API proxy for svc_sandbox: run containers only")
    parser.add_argument("--listen", default="tcp://127.0.0.1:2375", help="unix:///path or tcp://host:port")
    parser.add_argument("--engine", default="unix:///var/run/docker.sock", help="the engine's socket")
    parser.add_argument("--allow-image", action="append", required=True, help="an image runs may use (repeat)")
    parser.add_argument("--label", default="m1flow.sandbox", help="label every run container must carry")
    parser.add_argument("--allow-env-root", action="append", default=[], metavar="DIR",
                        help="runs may bind an environment under DIR read-only (svc_sandbox's swe_envs; repeat)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = serve(args.listen, args.engine, args.allow_image, args.label, args.allow_env_root)
    log.info("docker proxy on %s -> %s; images %s", server.url, args.engine, args.allow_image)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
