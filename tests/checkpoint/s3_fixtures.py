"""A real S3-compatible server for the object-store tests: s3s-fs, built and cached by
scripts/s3_server.sh, started on a free port over a temporary directory and stopped at the end.

Skipped only when the toolchain to build it (cargo) is missing and no build is cached; a build that
fails is an error carrying the log's tail."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from m1flow.store_config import StoreConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "s3_server.sh"
BUCKET = "m1flow"
ACCESS, SECRET = "m1flow-test", "m1flow-test-secret"


@dataclass
class S3Server:
    endpoint: str
    bucket: str
    data: Path  # the directory it serves: each bucket a subdirectory
    credentials: Path

    def config(self, **overrides: object) -> StoreConfig:
        return StoreConfig(endpoint_url=self.endpoint, credentials_file=self.credentials, **overrides)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cached_binary() -> bool:
    cache = Path(os.environ.get("M1FLOW_CACHE", Path.home() / ".cache" / "m1flow"))
    return any((cache / "s3").glob("s3s-fs-*/bin/s3s-fs"))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("cargo") is None and not cached_binary():
        pytest.skip("no cargo to build the S3 server s3s-fs (scripts/s3_server.sh) and no cached build")
    build = subprocess.run(["bash", str(SCRIPT), "build"], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"scripts/s3_server.sh build failed (rc {build.returncode}):\n{build.stderr[-3000:]}")
    data = tmp_path_factory.mktemp("s3-data")
    port = str(free_port())
    env = {**os.environ, "M1FLOW_S3_ACCESS_KEY": ACCESS, "M1FLOW_S3_SECRET_KEY": SECRET}
    up = subprocess.run(["bash", str(SCRIPT), "up", str(data), port, BUCKET, "other"], capture_output=True,
                        text=True, env=env, timeout=60)
    if up.returncode != 0:
        pytest.fail(f"scripts/s3_server.sh up failed (rc {up.returncode}):\n{up.stderr[-3000:]}")
    credentials = tmp_path_factory.mktemp("s3-secret") / "credentials.json"
    credentials.write_text(json.dumps({"access_key_id": ACCESS, "secret_access_key": SECRET}))
    credentials.chmod(0o600)
    try:
        yield S3Server(up.stdout.strip().splitlines()[-1], BUCKET, data, credentials)
    finally:
        subprocess.run(["bash", str(SCRIPT), "down", port], capture_output=True, timeout=30)
