"""Where policies and learner checkpoints live: a directory (`file://`, a local disk or a shared
ReadWriteMany volume, the default under the run directory) or an S3-compatible object store
(`s3://bucket/prefix`), so a learner and a rollout fleet on different nodes meet without a shared
file system.

The layout is the same in both: `<root>/v000042/<the files of m1flow.checkpoint>`. A directory is
written atomically (temp dir + rename, m1flow.checkpoint). An object store has no rename, so the
learner writes the checkpoint into a local staging directory, uploads every file, and uploads
`learner_state.json` last: a version is complete, for resuming and rotation, once that object
exists, and it is announced on `policy` only after that. A reader downloads an s3 policy into a
bounded local cache (the newest K) and loads it from there; the SHA-256 the announcement carries is
checked on the downloaded files, and a copy that fails it is deleted, not kept.

The object store client is obstore (one wheel, no Python dependencies, multipart and concurrent
transfers in Rust), imported only when an s3:// URI is used: a laptop never loads it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from m1flow import checkpoint
from m1flow.store_config import StoreConfig
# the URIs, parsed without torch (m1flow.uris); callers name them store.within, store.root_uri, ...
from m1flow.uris import SCHEMES, UriError, child, is_remote, root_uri, scheme, split_s3, within  # noqa: F401

log = logging.getLogger(__name__)


# ---- the object store ----------------------------------------------------------------------
class FileCredentials:
    """obstore's credential provider over a mounted secret (JSON: access_key_id, secret_access_key,
    optional session_token), read again every few minutes so that a rotated secret takes effect
    without a restart."""

    def __init__(self, path: Path, refresh_s: float = 300.0) -> None:
        self.path, self.refresh_s = Path(path), refresh_s

    def __call__(self) -> dict[str, Any]:
        data = json.loads(self.path.read_text())
        return {"access_key_id": data["access_key_id"], "secret_access_key": data["secret_access_key"],
                "token": data.get("session_token"),
                "expires_at": datetime.now(timezone.utc) + timedelta(seconds=self.refresh_s)}


_clients: dict[tuple[str, str], Any] = {}


def client(cfg: StoreConfig, bucket: str) -> Any:
    """One obstore S3Store per (settings, bucket), reused: it holds the connection pool."""
    key = (cfg.model_dump_json(), bucket)
    if key not in _clients:
        from obstore.store import S3Store

        config: dict[str, Any] = {"region": cfg.region, "virtual_hosted_style_request": cfg.virtual_hosted}
        if cfg.endpoint_url:
            config["endpoint"] = cfg.endpoint_url
        endpoint = cfg.endpoint_url or os.environ.get("AWS_ENDPOINT_URL", "")
        _clients[key] = S3Store(bucket, config=config,
                                client_options={"allow_http": endpoint.startswith("http://"),
                                                "timeout": "300s", "connect_timeout": "10s"},
                                credential_provider=(FileCredentials(cfg.credentials_file)
                                                     if cfg.credentials_file is not None else None),
                                retry_config={"max_retries": 5, "retry_timeout": timedelta(seconds=120),
                                              "backoff": {"init_backoff": timedelta(milliseconds=100),
                                                          "max_backoff": timedelta(seconds=5), "base": 2}})
    return _clients[key]


def upload_file(cfg: StoreConfig, path: Path, uri: str) -> None:
    import obstore

    bucket, key = split_s3(uri)
    size = path.stat().st_size
    obstore.put(client(cfg, bucket), key, path, use_multipart=size > cfg.part_mb << 20,
                chunk_size=cfg.part_mb << 20, max_concurrency=cfg.concurrency)


def download_file(cfg: StoreConfig, uri: str, path: Path, size: int | None = None) -> None:
    """One object to `path`: a small one in one GET, a large one as `concurrency` ranged GETs in
    flight at once, each written at its offset (a single stream is bound by one connection)."""
    import asyncio

    import obstore

    bucket, key = split_s3(uri)
    store = client(cfg, bucket)
    part = cfg.part_mb << 20
    if size is None:
        size = obstore.head(store, key)["size"]
    if size <= part:
        with open(path, "wb") as fh:
            for chunk in obstore.get(store, key).stream(min_chunk_size=1 << 20):
                fh.write(chunk)
        return

    async def fetch(fd: int) -> None:
        gate = asyncio.Semaphore(cfg.concurrency)

        async def one(start: int) -> None:
            async with gate:
                data = await obstore.get_range_async(store, key, start=start, end=min(size, start + part))
                await asyncio.to_thread(os.pwrite, fd, memoryview(data), start)
        await asyncio.gather(*(one(start) for start in range(0, size, part)))

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        asyncio.run(fetch(fd))
    finally:
        os.close(fd)


def list_keys(cfg: StoreConfig, root: str) -> list[dict[str, Any]]:
    """Every object under root/ (path, size, last_modified)."""
    import obstore

    bucket, key = split_s3(root)
    out: list[dict[str, Any]] = []
    for batch in obstore.list(client(cfg, bucket), prefix=f"{key}/" if key else None):
        out.extend(batch)
    return out


def delete_keys(cfg: StoreConfig, bucket: str, keys: list[str]) -> None:
    import obstore

    if keys:
        obstore.delete(client(cfg, bucket), keys)


def download_dir(cfg: StoreConfig, uri: str, dest: Path, skip: tuple[str, ...] = ()) -> Path:
    """Copy the objects under `uri`/ (but those named in `skip`) into a fresh `dest` (written as a
    temp dir, then renamed)."""
    bucket, key = split_s3(uri)
    objects = [m for m in list_keys(cfg, uri) if PurePosixPath(m["path"]).name not in skip]
    if not objects:
        raise checkpoint.PolicyLoadError(f"no objects under {uri}")
    tmp = dest.with_name(f".tmp-{dest.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    jobs = []
    for meta in objects:
        rel = PurePosixPath(meta["path"]).relative_to(key)
        if ".." in rel.parts:
            raise checkpoint.PolicyLoadError(f"refusing object {meta['path']} under {uri}")
        target = tmp.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        jobs.append((f"s3://{bucket}/{meta['path']}", target, meta["size"]))
    part = cfg.part_mb << 20
    with ThreadPoolExecutor(cfg.concurrency) as pool:  # a policy is ~10 small files: their round trips overlap
        list(pool.map(lambda job: download_file(cfg, *job), [j for j in jobs if j[2] <= part]))
    for job in (j for j in jobs if j[2] > part):  # one shard at a time, its ranges in parallel: memory bounded
        download_file(cfg, *job)
    shutil.rmtree(dest, ignore_errors=True)
    try:
        os.rename(tmp, dest)
    except OSError:  # another process (a rank beside us) renamed its copy first: keep that one
        shutil.rmtree(tmp, ignore_errors=True)
        if not dest.is_dir():
            raise
    return dest


# ---- the learner's side --------------------------------------------------------------------
@dataclass
class Stored:
    """A checkpoint as written or found: the URI it is announced by and a local copy of it."""

    uri: str
    directory: Path


class CheckpointStore:
    """The learner's checkpoints under one root URI: write (and rotate), find the newest complete one."""

    def __init__(self, root: str | Path, cfg: StoreConfig | None = None, staging: Path | None = None) -> None:
        self.root = root_uri(root)
        self.cfg = cfg or StoreConfig()
        self.remote = is_remote(self.root)
        if self.remote and staging is None:
            raise ValueError(f"an object-store checkpoint root ({self.root}) needs a local staging directory")
        self.staging = Path(staging) if staging is not None else None

    @property
    def local_root(self) -> Path:
        """Where checkpoints are written on this machine: the root itself, or the staging directory."""
        return self.staging if self.remote else checkpoint.path_of(self.root)

    def save(self, model: Any, tokenizer: Any, optimizer: Any, state: checkpoint.LearnerState, keep: int = 3,
             grace_s: float = 60.0) -> tuple[Stored, str]:
        """Write version `state.version`; return it and its weights' checksum. On s3 the staging copy
        of only the newest stays (resuming downloads), and the remote ones rotate like a directory's."""
        if not self.remote:
            final, sha = checkpoint.save_checkpoint(self.local_root, model, tokenizer, optimizer, state,
                                                    keep=keep, grace_s=grace_s)
            return Stored(checkpoint.uri_for(final), final), sha
        final, sha = checkpoint.save_checkpoint(self.local_root, model, tokenizer, optimizer, state,
                                                keep=1, grace_s=0.0)
        uri = child(self.root, final.name)
        self.upload(final, uri)
        self.rotate(keep, grace_s)
        return Stored(uri, final), sha

    def upload(self, directory: Path, uri: str) -> None:
        """Every file of the checkpoint, learner_state.json last: its presence marks it complete."""
        files = sorted(p for p in directory.rglob("*") if p.is_file())
        last = [p for p in files if p.name == checkpoint.STATE_FILE]
        with ThreadPoolExecutor(self.cfg.concurrency) as pool:
            list(pool.map(lambda p: upload_file(self.cfg, p, child(uri, p.relative_to(directory).as_posix())),
                          [p for p in files if p not in last]))
        for path in last:  # only after every other file is there
            upload_file(self.cfg, path, child(uri, path.relative_to(directory).as_posix()))

    def _versions(self) -> dict[str, dict[str, Any]]:
        """version dir name -> {"keys": [...], "done": last_modified of its state file or None}."""
        _, key = split_s3(self.root)
        versions: dict[str, dict[str, Any]] = {}
        for meta in list_keys(self.cfg, self.root):
            rel = meta["path"][len(key) + 1:] if key else meta["path"]
            name, _, rest = rel.partition("/")
            if not name.startswith("v") or not rest:
                continue
            entry = versions.setdefault(name, {"keys": [], "done": None})
            entry["keys"].append(meta["path"])
            if rest == checkpoint.STATE_FILE:
                entry["done"] = meta["last_modified"].timestamp()
        return versions

    def rotate(self, keep: int, grace_s: float) -> list[str]:
        """As m1flow.checkpoint.rotate: drop all but the newest `keep`, each only `grace_s` after its
        successor was completed (a replica handed it may still be downloading)."""
        versions = self._versions()
        done = sorted(n for n, v in versions.items() if v["done"] is not None)
        bucket, _ = split_s3(self.root)
        now, removed = time.time(), []
        for old, successor in zip(done[:-keep], done[1:]):
            if now - versions[successor]["done"] >= grace_s:
                keys = versions[old]["keys"]  # the state file last: a half-deleted one is incomplete
                keys.sort(key=lambda k: k.endswith("/" + checkpoint.STATE_FILE))
                delete_keys(self.cfg, bucket, keys)
                removed.append(child(self.root, old))
        return removed

    def latest(self) -> Stored | None:
        """The newest complete checkpoint (on s3: downloaded into staging to resume from), or None."""
        if not self.remote:
            found = checkpoint.latest(self.local_root)
            return Stored(checkpoint.uri_for(found), found) if found is not None else None
        done = sorted(n for n, v in self._versions().items() if v["done"] is not None)
        if not done:
            return None
        uri = child(self.root, done[-1])
        local = self.local_root / done[-1]
        if checkpoint.latest(self.local_root) != local or not checkpoint.has_weights(local):
            self.local_root.mkdir(parents=True, exist_ok=True)
            download_dir(self.cfg, uri, local)
        return Stored(uri, local)


# ---- the readers' side ---------------------------------------------------------------------
class PolicyCache:
    """Local directories for announced policy URIs: a file:// one as it is; an s3:// one downloaded
    once into `directory` (the newest `keep` kept)."""

    def __init__(self, cfg: StoreConfig | None = None, directory: Path | None = None) -> None:
        self.cfg = cfg or StoreConfig()
        self.directory = Path(directory or self.cfg.cache_dir or Path("run") / "policy-cache")

    def local(self, uri: str) -> Path:
        if not is_remote(uri):
            return checkpoint.path_of(uri)
        bucket, key = split_s3(uri)
        name = f"{PurePosixPath(key).name or bucket}-{hashlib.sha256(uri.encode()).hexdigest()[:12]}"
        dest = self.directory / name
        if not dest.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            # the optimizer's moments are twice the weights and no use to inference: not fetched
            download_dir(self.cfg, uri, dest, skip=(checkpoint.OPTIMIZER_FILE,))
            log.info("downloaded %s into %s in %.2fs", uri, dest, time.perf_counter() - started)
        os.utime(dest)
        self.evict(keep_also=dest)
        return dest

    def discard(self, directory: Path) -> None:
        """Forget a downloaded copy (its checksum did not match): the next try downloads again."""
        if self.directory in Path(directory).parents:
            shutil.rmtree(directory, ignore_errors=True)

    def evict(self, keep_also: Path | None = None) -> list[Path]:
        """Keep the newest `cache_keep` copies (by last use), and no temp dir a crash left (an hour old)."""
        entries = sorted((p for p in self.directory.iterdir() if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        removed = [p for p in entries[self.cfg.cache_keep:] if p != keep_also]
        removed += [p for p in self.directory.glob(".tmp-*") if time.time() - p.stat().st_mtime > 3600]
        for path in removed:
            shutil.rmtree(path, ignore_errors=True)
        return removed
