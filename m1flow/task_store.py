"""Task payloads stored once, content-addressed, and referenced by URI from a prompt's VerifierSpec.

Why: an SWE task's repository snapshot would otherwise cross Kafka in each of the G rollouts of its
group (and again in every replay). The source writes it here and puts the URI in
`VerifierSpec.payload_uri`; the reward service reads it back when it scores. Like a checkpoint, a
payload lives on storage every service can read (the run directory: `run_dir/tasks`), named by the
SHA-256 of its bytes, so writing the same payload twice is free and a corrupted or substituted
file is refused on read.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import urlparse

STORE_DIR = "tasks"


class TaskStoreError(RuntimeError):
    """A payload URI that cannot be resolved to the bytes it names."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class TaskStore:
    """A local directory of payloads named by their SHA-256 (file:// URIs)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    @classmethod
    def in_run_dir(cls, run_dir: str | Path) -> TaskStore:
        return cls(Path(run_dir) / STORE_DIR)

    def put(self, data: bytes) -> str:
        """Store `data` (once) and return its URI."""
        digest = sha256_hex(data)
        path = self.root / digest
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{digest}.{os.getpid()}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)  # atomic: a reader sees all of it or nothing
        return path.as_uri()


def read_payload(uri: str) -> bytes:
    """The bytes a payload URI names, verified against the SHA-256 in its name."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        raise TaskStoreError(f"unsupported task payload URI scheme {parsed.scheme!r} in {uri!r}")
    path = Path(parsed.path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TaskStoreError(f"task payload {uri} cannot be read: {exc}") from exc
    if sha256_hex(data) != path.name:
        raise TaskStoreError(f"task payload {uri} does not match its SHA-256 name (corrupted or replaced)")
    return data
