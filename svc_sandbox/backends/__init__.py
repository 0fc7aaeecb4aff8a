"""The places a run can happen: a Docker container (production) or the local bubblewrap jail."""
from __future__ import annotations

from typing import Literal

from svc_sandbox.backends.base import Backend
from svc_sandbox.backends.docker import DockerConfig
from svc_sandbox.backends.jail import JailConfig

BackendKind = Literal["auto", "docker", "jail"]


def choose_backend(kind: BackendKind = "auto", jail: JailConfig | None = None,
                   docker: DockerConfig | None = None) -> Backend:
    """Docker where an engine answers and holds the run image (production), else the local jail."""
    from svc_sandbox.backends.docker import DockerBackend
    from svc_sandbox.backends.jail import JailBackend
    if kind == "docker" or (kind == "auto" and not DockerBackend.available(docker)):
        return DockerBackend(docker)
    if kind in ("jail", "auto"):
        missing = JailBackend.missing(jail)
        if missing:
            raise RuntimeError(f"no sandbox backend: no Docker engine and the jail lacks {missing} "
                               "(run scripts/system_deps.sh)")
        return JailBackend(jail)
    raise ValueError(f"unknown backend {kind!r}")
