"""Settings of the learner service."""
from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from m1flow import store
from m1flow.checkpoint import LEARNER_CHECKPOINTS
from m1flow.checkpoint import path_of as checkpoint_path
from m1flow.rl.config import AlgorithmConfig
from m1flow.runtime.config import ServiceConfig
from svc_learner.update import TrainConfig


class LearnerServiceConfig(ServiceConfig):
    """svc_learner: selects scored groups, trains on them (CISPO by default), checkpoints, announces policies."""

    init_checkpoint: Path | None = Field(
        None, description="policy to start from when checkpoint_dir holds none (a learner checkpoint also "
                          "gives its version and optimizer: how a replay starts)")
    checkpoint_dir: Path | None = Field(None, description="where checkpoints go; default run_dir/learner/checkpoints")
    checkpoint_uri: str = Field(
        "", description="where checkpoints go as a URI, over checkpoint_dir: file:///shared/ckpt (a "
                        "ReadWriteMany volume) or s3://bucket/prefix (an object store, `store` says how to reach it)")
    batch_groups: int = Field(16, ge=1, description="trainable groups per learner step (skipped groups take no place)")
    batch_timeout_s: float = Field(
        30.0, gt=0, description="train on fewer groups once the input has been idle and caught up this long")
    keep_checkpoints: int = Field(3, ge=1, description="checkpoints kept besides those still in their grace period")
    checkpoint_grace_s: float = Field(60.0, ge=0, description="a superseded checkpoint stays this long for readers")
    seed: int = 0
    torch_threads: int = 1
    device: str = Field("auto", description="auto (the local CUDA device where present, else cpu), cpu, cuda:N")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig,
                                       description="advantage estimator, policy loss, selection, shaping")
    train: TrainConfig = Field(default_factory=lambda: TrainConfig(lr=2e-4, minibatches=2),
                               description="optimizer, minibatch updates per batch, LM head")

    @model_validator(mode="after")
    def _correction_has_proximal(self) -> LearnerServiceConfig:
        if self.algorithm.correction.active and self.train.old_logp_source != "recompute":
            raise ValueError("algorithm.correction needs train.old_logp_source: recompute (the corrections weigh "
                             "the learner's recomputed log-probs against the rollout's; with 'rollout' they are "
                             "the same and the correction does nothing)")
        return self

    def checkpoint_root(self) -> Path:
        """The local directory checkpoints are written to (on s3: the staging copy before upload)."""
        if self.checkpoint_uri and store.is_remote(self.checkpoint_uri):
            return self.run_dir / "learner" / "staging"
        if self.checkpoint_uri:
            return checkpoint_path(self.checkpoint_uri)
        return self.checkpoint_dir or self.run_dir / LEARNER_CHECKPOINTS

    def checkpoint_store(self) -> store.CheckpointStore:
        """Where checkpoints are written, found on resume and rotated: the URI, or the directory."""
        root = self.checkpoint_uri or self.checkpoint_root()
        return store.CheckpointStore(root, self.store, staging=self.checkpoint_root())
