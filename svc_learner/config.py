"""Settings of the learner service."""
from __future__ import annotations

from pathlib import Path

from pydantic import Field

from m1flow.runtime.config import ServiceConfig
from svc_learner.update import LearnerConfig


class LearnerServiceConfig(ServiceConfig):
    """svc_learner: CISPO updates on scored groups, checkpoints, policy announcements."""

    init_checkpoint: Path | None = Field(None, description="policy to start from when no checkpoint exists")
    batch_groups: int = Field(16, description="scored groups (kept or dropped) per learner step")
    keep_checkpoints: int = Field(3, ge=1, description="checkpoints kept besides those still in their grace period")
    checkpoint_grace_s: float = Field(60.0, ge=0, description="a superseded checkpoint stays this long for readers")
    seed: int = 0
    torch_threads: int = 1
    train: LearnerConfig = Field(default_factory=lambda: LearnerConfig(lr=2e-4, minibatches=2))
