"""A compose cluster for one test module: up, and down with its volumes however the module ends."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from ops.cluster import Cluster


@contextlib.contextmanager
def running(cluster: Cluster, phases: dict[str, float], title: str) -> Iterator[Cluster]:
    """The cluster up (`up --wait`, timed into phases) for a module, and down with its volumes
    however the module ends; prints the phases."""
    try:
        t = time.monotonic()
        cluster.up(build=False, timeout_s=900)
        phases["up --wait"] = time.monotonic() - t
        yield cluster
    finally:
        t = time.monotonic()
        cluster.down(volumes=True)
        phases["down -v"] = time.monotonic() - t
        print(f"\n{title}:\n" + "\n".join(f"  {name:<30}{s:>7.1f}s" for name, s in phases.items()))
