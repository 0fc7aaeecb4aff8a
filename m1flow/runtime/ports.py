"""A free local TCP port, for a server that picks its own (a service's metrics or gRPC port at 0, the
local broker's listeners): the kernel's choice at bind time, so two callers never race on a guess."""
from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (the caller binds it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
