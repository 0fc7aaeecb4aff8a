"""Settings of the rollout service."""
from __future__ import annotations

from pydantic import Field

from m1flow.runtime.config import ServiceConfig


class RolloutConfig(ServiceConfig):
    """svc_rollout: samples G completions per prompt with the current policy."""

    group_size: int = Field(8, description="completions per prompt when the prompt does not say")
    max_new_tokens: int = Field(8, description="output window until `control` sets another")
    temperature: float = 1.0
    top_p: float = 0.95
    early_stop_run: int = Field(3000, description="stop after this many consecutive near-certain tokens")
    early_stop_prob: float = 0.99
    max_ahead_groups: int = Field(32, description="pause after this many groups on one policy version")
    policy_retry_s: float = Field(5.0, description="retry a policy that failed to load after this long")
    pinned_policy: str = Field("", description="replay: sample with this checkpoint URI only, not `policy`'s")
    pinned_policy_version: int = Field(0, ge=0, description="the version of pinned_policy (stamped on rollouts)")
    torch_threads: int = 1
