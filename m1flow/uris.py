"""Checkpoint URIs: a directory (`file://` or a plain path) or `s3://bucket/prefix`, parsed,
normalised and tested for lying under a root, without the model stack.

Kept apart from m1flow.store (which re-exports these names) because every consumer of `policy`
checks an announcement's URI against the checkpoint roots (m1flow.security.announcements), and the
ones that never load weights (svc_source, svc_monitor) should not import torch and transformers
(m1flow.checkpoint) for it. `local_path` and `file_uri` are m1flow.checkpoint's `path_of` and
`uri_for` without that import; m1flow/checkpoint.py itself is left as it is, since its bytes key the
cached warm-start policy (ops/warmstart.py) and any edit retrains it.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

SCHEMES = ("file", "s3")


class UriError(ValueError):
    """A checkpoint URI or root that names no place a policy may be read from (the reason says why)."""


def file_uri(directory: str | Path) -> str:
    return Path(directory).resolve().as_uri()


def local_path(uri: str | Path) -> Path:
    """The local directory a checkpoint URI (file:// or a plain path) names."""
    parsed = urlparse(str(uri))
    if parsed.scheme not in ("", "file"):
        raise UriError(f"unsupported checkpoint URI scheme {parsed.scheme!r} in {uri}")
    return Path(parsed.path)


def scheme(uri: str | Path) -> str:
    """'file' for a file:// URI or a plain path, else the URI's scheme (refused unless in SCHEMES)."""
    parsed = urlparse(str(uri))
    kind = parsed.scheme or "file"
    if kind not in SCHEMES:
        raise UriError(f"unsupported checkpoint URI scheme {kind!r} in {uri}")
    return kind


def is_remote(uri: str | Path) -> bool:
    return scheme(uri) != "file"


def root_uri(root: str | Path) -> str:
    """A checkpoint root as a normal URI: a path (relative ones from here) as file://, s3:// as given
    without a trailing slash."""
    if scheme(root) == "file":
        return file_uri(local_path(root))
    bucket, key = split_s3(str(root))
    return f"s3://{bucket}/{key}".rstrip("/")


def split_s3(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// URI; a key with empty, '.' or '..' segments is refused, since the
    roots check compares segments and a store could resolve them."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise UriError(f"not an s3://bucket/key URI: {uri}")
    key = parsed.path.lstrip("/").rstrip("/")
    if parsed.query or parsed.fragment or any(s in ("", ".", "..") for s in key.split("/") if key):
        raise UriError(f"refusing s3 URI with an unusual key: {uri}")
    return parsed.netloc, key


def child(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def within(uri: str, roots: list[str]) -> bool:
    """Whether `uri` names a location under one of `roots` (normal URIs, see root_uri): a file path
    after resolving symlinks and '..', an s3 key by whole segments in the same bucket."""
    kind = scheme(uri)
    if kind == "file":
        where = local_path(uri).resolve()
        for root in roots:
            if scheme(root) == "file":
                base = local_path(root)
                if where == base or base in where.parents:
                    return True
        return False
    bucket, key = split_s3(uri)
    parts = key.split("/")
    for root in roots:
        if scheme(root) == "s3":
            root_bucket, root_key = split_s3(root)
            prefix = root_key.split("/") if root_key else []
            if root_bucket == bucket and parts[:len(prefix)] == prefix:
                return True
    return False
