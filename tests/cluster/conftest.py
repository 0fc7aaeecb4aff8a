"""A Docker engine and Compose v2 for the cluster tests, set up by the project's own scripts.

The session fixture runs scripts/docker_engine.sh (install and start an engine when none answers,
build Compose v2 once) and scripts/docker_images.sh (stand-in base images where no registry
answers). Only a machine that cannot run an engine at all skips, with the script's one-line reason.
"""
from __future__ import annotations

import subprocess

import pytest

from ops import ROOT

CANNOT = 3  # scripts/docker_engine.sh's exit code for "no engine can run here"


@pytest.fixture(scope="session")
def docker_engine() -> None:
    out = subprocess.run(["bash", str(ROOT / "scripts" / "docker_engine.sh")], capture_output=True, text=True)
    if out.returncode == CANNOT:
        pytest.skip(out.stderr.strip().splitlines()[-1])
    assert out.returncode == 0, f"scripts/docker_engine.sh failed:\n{out.stderr[-3000:]}"


@pytest.fixture(scope="session")
def services_image(docker_engine) -> float:
    """The services' image, built once for every cluster test module of the session (the plaintext
    and the secure cluster run the same image); returns the seconds the build took."""
    import time

    from ops.cluster import Cluster, ClusterConfig

    t = time.monotonic()
    Cluster(ClusterConfig(project="m1flowtestimage")).build(quiet=True)
    return time.monotonic() - t

