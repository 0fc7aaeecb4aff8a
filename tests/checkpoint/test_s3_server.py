"""scripts/s3_server.sh as the tests and the bench use it: `build` is idempotent (cached: instant,
the same binary), `up` serves a directory on the port it is given and prints the endpoint, `down`
stops it and frees the port."""
from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request

from tests.checkpoint.s3_fixtures import SCRIPT, free_port


def test_build_up_down(s3_server, tmp_path) -> None:  # s3_server: the build exists (or the test skips)
    started = time.monotonic()
    first = subprocess.run(["bash", str(SCRIPT), "build"], capture_output=True, text=True, check=True).stdout
    second = subprocess.run(["bash", str(SCRIPT), "build"], capture_output=True, text=True, check=True).stdout
    assert first == second and first.strip().endswith("/bin/s3s-fs") and time.monotonic() - started < 5
    port = free_port()
    up = subprocess.run(["bash", str(SCRIPT), "up", str(tmp_path / "data"), str(port), "bucket1"],
                        capture_output=True, text=True, check=True, timeout=60)
    assert up.stdout.strip() == f"http://127.0.0.1:{port}" and (tmp_path / "data" / "bucket1").is_dir()
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/bucket1")
        raise AssertionError("an unsigned request was served")
    except urllib.error.HTTPError as exc:
        assert exc.code == 403  # it checks signatures, as a real store does
    subprocess.run(["bash", str(SCRIPT), "down", str(port)], check=True, timeout=30)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
