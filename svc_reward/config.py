"""Settings of the reward service."""
from __future__ import annotations

from pydantic import Field

from m1flow.runtime.config import ServiceConfig


class RewardConfig(ServiceConfig):
    """svc_reward: scores rollouts, completes groups, computes advantages."""

    group_timeout_s: float = Field(60.0, description="score a group with what arrived after this long")
    format_reward: float = Field(0.1, description="added when the answer is well formed")
    overlong_buffer_frac: float = Field(0.25, description="soft overlong buffer as a fraction of the window")
    scoring_threads: int = Field(4, description="concurrent scoring jobs (slow sandbox calls overlap)")
    sandbox_address: str = Field("", description="svc_sandbox gRPC address for code and SWE tasks")
    verify_timeout_s: float = 10.0
