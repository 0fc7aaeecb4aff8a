"""A throwaway PostgreSQL server from Debian's `postgresql` package (scripts/monitor_deps.sh installs it):
initdb into a temporary directory, start on a free loopback port, drop everything afterwards.

initdb refuses to run as root, so as root the cluster belongs to the `postgres` user the package
creates. Where no server binaries exist the tests that need one skip and say why.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_owner(cmd: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *cmd] if user else cmd


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL of a fresh server (database `postgres`, trust auth on loopback)."""
    bindir = pg_bin()
    if bindir is None:
        raise FileNotFoundError("no PostgreSQL server binaries under /usr/lib/postgresql (run scripts/monitor_deps.sh)")
    user = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="m1flow-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    if user:
        entry = pwd.getpwnam(user)
        for path in (root, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    run = lambda cmd: subprocess.run(_as_owner(cmd, user), check=True, capture_output=True, text=True)  # noqa: E731
    try:
        run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
        run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "start",
             "-o", f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"])
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], user),
                           capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(url: str, name: str) -> str:
    """A new empty database on the server at `url`; its URL."""
    import psycopg

    base = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + f"/{name}"

