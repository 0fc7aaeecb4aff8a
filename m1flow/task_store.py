"""Task payloads stored once, content-addressed, and referenced by URI from a prompt's VerifierSpec.

Why: an SWE task's repository snapshot would otherwise cross Kafka in each of the G rollouts of its
group (and again in every replay). The source writes it here and puts the URI in
`VerifierSpec.payload_uri`; the reward service reads it back when it scores. Like a checkpoint, a
payload lives on storage every service can read (the run directory: `run_dir/tasks`), named by the
SHA-256 of its bytes, so writing the same payload twice is free.

A `payload_uri` is written by whoever wrote the prompt (a dataset row can carry it), so reading
one is reading an attacker's choice of path. `TaskStore.read` therefore takes only a file directly
in the store (a name that is a SHA-256, not a symlink: `O_NOFOLLOW`), only a regular file (opened
non-blocking, so a FIFO does not hang the reader; a device is refused before any read), only up to
`max_payload_bytes`, and hashes while it reads, stopping at the cap: `/dev/zero`, a FIFO, a path
outside the store, an oversize or a substituted file are each refused with the reason, at once.
"""
from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import stat
import tarfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, Field

STORE_DIR = "tasks"
MB = 1024 * 1024
CHUNK = 1024 * 1024
_DIGEST = re.compile(r"[0-9a-f]{64}")


class TaskStoreError(RuntimeError):
    """A payload URI that cannot be resolved to the bytes it names (the message says why)."""


class TaskStoreConfig(BaseModel):
    """Where payloads are taken from, and how large one may be."""

    root: Path | None = Field(None, description="the task store folder; default run_dir/tasks")
    max_payload_bytes: int = Field(48 * MB, gt=0, description="the largest payload read (the sandbox takes at "
                                   "most 48 MB of snapshot and patch together); a larger one is refused")

    def store(self, run_dir: str | Path) -> TaskStore:
        """The store this config names, for a process whose run directory is `run_dir`."""
        return TaskStore(self.root or Path(run_dir) / STORE_DIR, self.max_payload_bytes)


def snapshot_tar(repo_dir: str | Path) -> bytes:
    """A repository directory (with or without .git) as tar bytes, paths relative to its root: the
    layout svc_sandbox's SWE runner unpacks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for entry in sorted(Path(repo_dir).iterdir()):
            tar.add(entry, arcname=entry.name)
    return buffer.getvalue()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class TaskStore:
    """A local directory of payloads named by their SHA-256 (file:// URIs)."""

    def __init__(self, root: str | Path, max_payload_bytes: int = TaskStoreConfig().max_payload_bytes) -> None:
        self.root = Path(root).resolve()
        self.max_payload_bytes = max_payload_bytes

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

    def path_of(self, uri: str) -> Path:
        """The file a payload URI names, if it names one directly in this store; else TaskStoreError."""
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise TaskStoreError(f"task payload {uri!r}: unsupported URI scheme {parsed.scheme!r} (file:// only)")
        if parsed.netloc not in ("", "localhost"):
            raise TaskStoreError(f"task payload {uri!r}: names host {parsed.netloc!r}, not a local file")
        path = Path(unquote(parsed.path))
        if not _DIGEST.fullmatch(path.name):
            raise TaskStoreError(f"task payload {uri!r}: its name is not a SHA-256 (a task store file's name is "
                                 f"the hex digest of its bytes)")
        if Path(os.path.realpath(path.parent)) != self.root:
            raise TaskStoreError(f"task payload {uri!r}: outside the task store {self.root}")
        return path

    def read(self, uri: str, keep: bool = True) -> bytes:
        """The bytes a payload URI names, verified against its SHA-256 name as they are read
        (keep=False: only verified, b"" returned)."""
        path = self.path_of(uri)
        try:  # non-blocking: opening a FIFO for reading must not wait for a writer; no symlink
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            why = "a symlink (a payload is a file in the store)" if exc.errno == errno.ELOOP else exc.strerror or exc
            raise TaskStoreError(f"task payload {uri!r} cannot be read: {why}") from None
        with os.fdopen(fd, "rb", buffering=0) as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise TaskStoreError(f"task payload {uri!r} is not a regular file ({_kind(info.st_mode)})")
            if info.st_size > self.max_payload_bytes:
                raise TaskStoreError(f"task payload {uri!r} is {info.st_size} bytes, over the cap of "
                                     f"{self.max_payload_bytes} (task_store.max_payload_bytes)")
            return self._read_verified(fh, uri, path.name, keep)

    def _read_verified(self, fh, uri: str, digest: str, keep: bool) -> bytes:  # noqa: ANN001 - a raw file
        """Read to the end, hashing as it goes; stop one byte past the cap (a file that grew)."""
        hasher, chunks, total = hashlib.sha256(), [], 0
        while chunk := fh.read(min(CHUNK, self.max_payload_bytes + 1 - total)):
            hasher.update(chunk)
            if keep:
                chunks.append(chunk)
            total += len(chunk)
            if total > self.max_payload_bytes:
                raise TaskStoreError(f"task payload {uri!r} grew past the cap of {self.max_payload_bytes} bytes "
                                     "while read (task_store.max_payload_bytes)")
        if hasher.hexdigest() != digest:
            raise TaskStoreError(f"task payload {uri!r} does not match its SHA-256 name (corrupted or replaced)")
        return b"".join(chunks)

    def verify(self, uri: str) -> None:
        """Raise TaskStoreError with the reason unless `uri` reads back whole and intact (`m1flow data
        validate`, before a row's gold is scored)."""
        self.read(uri, keep=False)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"
