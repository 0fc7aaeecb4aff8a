"""Which replica this process is when no launcher says (`M1FLOW_REPLICA=auto`): the index in its
container's name.

`docker compose --scale` gives every replica the same environment, so the index cannot come from
there. It names the containers `<project>-<service>-<n>` (Kubernetes StatefulSets: `<name>-<n>` as
the hostname), and Docker's DNS answers a reverse lookup of a container's address with that name.
The container's hostname is its id, and /etc/hosts maps the address back to the id, so the reverse
lookup asks the DNS server directly instead of going through the resolver library.
"""
from __future__ import annotations

import random
import re
import socket
import struct
from pathlib import Path

_INDEX = re.compile(r"-(\d+)$")
_PTR = 12


class ReplicaError(RuntimeError):
    """No replica index can be derived; the message says what was tried."""


def container_replica(hostname: str | None = None, resolv_conf: Path = Path("/etc/resolv.conf")) -> int:
    """The trailing `-<n>` of this host's name, or of the name DNS gives its address."""
    hostname = hostname or socket.gethostname()
    found = _INDEX.search(hostname)
    if found:
        return int(found.group(1))
    address = socket.gethostbyname(hostname)
    names = []
    for server in _nameservers(resolv_conf):
        try:
            name = reverse_lookup(address, server)
        except OSError:
            continue
        names.append(name)
        found = _INDEX.search(name.split(".", 1)[0])
        if found:
            return int(found.group(1))
    raise ReplicaError(f"no replica index in hostname {hostname!r} nor in the DNS name(s) {names} of {address}; "
                       "set M1FLOW_REPLICA to a number")


def _nameservers(resolv_conf: Path) -> list[str]:
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return []
    return [line.split()[1] for line in lines if line.startswith("nameserver") and len(line.split()) > 1]


def reverse_lookup(address: str, server: str, timeout: float = 2.0, port: int = 53) -> str:
    """The PTR name of an IPv4 address, asked of one DNS server over UDP."""
    ident = random.randrange(1 << 16)
    labels = [*reversed(address.split(".")), "in-addr", "arpa"]
    query = (struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
             + b"".join(bytes([len(label)]) + label.encode() for label in labels) + b"\0"
             + struct.pack(">HH", _PTR, 1))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(query, (server, port))
        reply, _ = sock.recvfrom(4096)
    got_ident, flags, questions, answers = struct.unpack(">HHHH", reply[:8])
    if got_ident != ident or flags & 0x000F or not answers:
        raise OSError(f"no PTR record for {address} from {server} (rcode {flags & 0x000F})")
    offset = 12
    for _ in range(questions):
        offset = _read_name(reply, offset)[1] + 4
    for _ in range(answers):
        offset = _read_name(reply, offset)[1]
        rtype, _cls, _ttl, length = struct.unpack(">HHIH", reply[offset:offset + 10])
        offset += 10
        if rtype == _PTR:
            return _read_name(reply, offset)[0]
        offset += length
    raise OSError(f"no PTR record for {address} from {server}")


def _read_name(data: bytes, offset: int) -> tuple[str, int]:
    """A DNS name at `offset` (with compression pointers) and the offset just after it."""
    labels: list[str] = []
    end = None
    for _ in range(128):  # bounds a malicious pointer loop
        length = data[offset]
        if length & 0xC0 == 0xC0:
            end = end if end is not None else offset + 2
            offset = ((length & 0x3F) << 8) | data[offset + 1]
        elif length == 0:
            return ".".join(labels), end if end is not None else offset + 1
        else:
            labels.append(data[offset + 1:offset + 1 + length].decode("ascii", "replace"))
            offset += 1 + length
    raise OSError("DNS name too long or looping")
