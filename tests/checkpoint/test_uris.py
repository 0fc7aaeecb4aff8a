"""The checkpoint roots as URI prefixes (m1flow.uris.within, also store.within): a folder contains what lies under it
after resolving '..', an s3 prefix contains keys by whole segments in its own bucket, and anything
else (another scheme, a key with '..') is outside. No server needed."""
from __future__ import annotations

from pathlib import Path

import pytest

from m1flow import store
from m1flow.checkpoint import uri_for
from m1flow.uris import UriError
from m1flow.security.config import SecurityConfig


def test_file_roots_contain_only_what_lies_under_them(tmp_path: Path) -> None:
    roots = [store.root_uri(tmp_path / "run")]
    assert store.within(uri_for(tmp_path / "run" / "learner" / "v000001"), roots)
    assert store.within(str(tmp_path / "run" / "v1"), roots)  # a plain path is a file:// URI
    assert not store.within(str(tmp_path / "run" / ".." / "elsewhere"), roots)
    assert not store.within(uri_for(tmp_path / "run-evil" / "v1"), roots)
    assert not store.within("s3://bucket/run/v1", roots)


def test_s3_roots_contain_keys_by_whole_segments_in_their_bucket() -> None:
    roots = [store.root_uri("s3://m1flow/run1/ckpt/")]
    assert roots == ["s3://m1flow/run1/ckpt"]
    assert store.within("s3://m1flow/run1/ckpt/v000001", roots)
    assert not store.within("s3://m1flow/run1/ckpt-evil/v000001", roots)
    assert not store.within("s3://other/run1/ckpt/v000001", roots)
    assert not store.within("file:///run1/ckpt/v000001", roots)
    for bad in ("s3://m1flow/run1/ckpt/../../x", "s3://m1flow/run1/ckpt/./v1", "s3://m1flow/run1//ckpt/v1",
                "s3:///run1/ckpt", "s3://m1flow/run1/ckpt/v1?versionId=3"):
        with pytest.raises(UriError):
            store.within(bad, roots)
    with pytest.raises(UriError):
        store.within("gs://m1flow/run1/ckpt/v1", roots)
    assert store.within("s3://m1flow/anything", [store.root_uri("s3://m1flow")])  # a whole bucket


def test_security_block_takes_paths_and_uris_as_roots(tmp_path: Path) -> None:
    block = SecurityConfig(checkpoint_roots=[tmp_path, "s3://m1flow/run1"])
    assert block.checkpoint_roots == [str(tmp_path), "s3://m1flow/run1"]
    assert SecurityConfig.model_validate_json(block.model_dump_json()) == block
