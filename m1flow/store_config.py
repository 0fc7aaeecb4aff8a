"""How a process reaches checkpoint URIs (m1flow.store): a block of every service's config, kept
apart from m1flow.store so that a config that does not touch checkpoints imports no torch."""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class StoreConfig(BaseModel):
    """How this process reaches `s3://` checkpoint URIs (a `file://` one needs nothing). Credentials
    are never held here: they come from a file (a mounted secret) or the standard AWS_* variables."""

    endpoint_url: str = Field("", description="S3-compatible endpoint (http://host:port); empty: AWS's, "
                              "or AWS_ENDPOINT_URL from the environment")
    region: str = Field("us-east-1", description="the store's region (most S3-compatible servers ignore it)")
    credentials_file: Path | None = Field(
        None, description="JSON with access_key_id and secret_access_key (a mounted secret); "
                          "none: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY from the environment")
    virtual_hosted: bool = Field(False, description="bucket.host addressing (AWS); off: host/bucket, "
                                 "what self-hosted servers serve")
    cache_dir: Path | None = Field(None, description="where a reader downloads s3 policies; default "
                                   "run_dir/<service>/policy-cache")
    cache_keep: int = Field(2, ge=1, description="downloaded policies kept in the cache (the newest)")
    part_mb: int = Field(16, ge=5, description="multipart upload part size (S3's minimum is 5 MiB)")
    concurrency: int = Field(8, ge=1, description="parts of one file in flight at once, up and down")
