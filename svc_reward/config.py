"""Settings of the reward service."""
from __future__ import annotations

import logging
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from m1flow.runtime.config import ServiceConfig
from m1flow.task_store import TaskStoreConfig
from svc_reward.genrm.config import FLAT_KEYS, GenRMKindConfig
from svc_sandbox.client import Limits

log = logging.getLogger(__name__)


# The verifiers' own blocks live here, not in their modules: a verifier module registers itself with
# svc_reward.kinds, whose context carries this config, so a block defined beside its verifier would
# make the config and the verifiers import each other.
class MathVerifyConfig(BaseModel):
    workers: int = Field(2, ge=1, description="worker processes; also the most checks at once")
    timeout_s: float = Field(5.0, gt=0, description="hard deadline of one comparison")
    startup_timeout_s: float = Field(120.0, gt=0, description="time a new worker may take to import SymPy")
    memory_mb: int = Field(2048, ge=0, description="address-space limit per worker; 0 = none")
    max_tasks_per_worker: int = Field(1000, ge=1, description="recycle workers to drop SymPy caches")


class CodeRewardConfig(BaseModel):
    mode: Literal["fraction", "all"] = Field("fraction", description="fraction of tests passed, or 1 only if all pass")
    limits: Limits = Field(default_factory=Limits, description="limits of each test run")
    parallel: int = Field(1, ge=1, description="test cases run at once")


class SweRewardConfig(BaseModel):
    partial_reward: bool = Field(False, description="reward a patch that fixes some FAIL_TO_PASS tests and breaks "
                                                    "none with the share it fixes (SWE-bench's PARTIAL); off: 0")


class ScoreCaps(BaseModel):
    """The most one Score call (over gRPC) may hand the scorers; more is INVALID_ARGUMENT."""
    max_response_chars: int = Field(1 << 20, ge=1, description="characters of the response scored")
    max_spec_chars: int = Field(1 << 20, ge=1, description="characters of the verifier's spec and gold together")


class RewardConfig(ServiceConfig):
    """svc_reward: scores rollouts and completes groups (rewards, their parts, verdicts); no more."""

    deprecated_keys: ClassVar[tuple[str, ...]] = tuple(FLAT_KEYS)

    group_timeout_s: float = Field(60.0, description="score a group with what arrived after this long")
    scoring_threads: int = Field(4, description="concurrent scoring jobs (slow sandbox calls overlap)")
    scoring_wait_ms: int = Field(20, ge=1, description="while groups score, the longest a loop turn waits on "
                                                       "them before reading rollouts again (a group finished "
                                                       "sooner is emitted at once)")
    sandbox_address: str = Field("", description="svc_sandbox gRPC address for code and SWE tasks")
    math: MathVerifyConfig = Field(default_factory=MathVerifyConfig, description="the math-verify worker pool")
    code: CodeRewardConfig = Field(default_factory=CodeRewardConfig, description="code tasks: scoring mode, limits")
    swe: SweRewardConfig = Field(default_factory=SweRewardConfig, description="SWE tasks: partial reward")
    score: ScoreCaps = Field(default_factory=ScoreCaps, description="caps of one Score call")
    task_store: TaskStoreConfig = Field(default_factory=TaskStoreConfig,
                                        description="where payload_uri may point (run_dir/tasks) and the "
                                                    "largest payload read")
    genrm: GenRMKindConfig = Field(default_factory=GenRMKindConfig,
                                   description="GenRM: the judge (judge, openai, checkpoint, native, margin, ...), "
                                               "pairwise comparison and Swiss rounds, calibration")

    @model_validator(mode="before")
    @classmethod
    def _flat_genrm_keys(cls, data: Any) -> Any:
        """The flat `genrm_*` keys of before the block still load, into it; a key the block itself
        names wins."""
        if not isinstance(data, dict) or not any(key in data for key in FLAT_KEYS):
            return data
        data = dict(data)
        block = data.get("genrm") or {}
        block = dict(block.model_dump(exclude_unset=True) if isinstance(block, BaseModel) else block)
        for old, new in FLAT_KEYS.items():
            if old in data:
                value = data.pop(old)
                block.setdefault(new, value)
                log.warning("reward config: %r is deprecated, set genrm.%s (the `genrm:` block) instead", old, new)
        data["genrm"] = block
        return data
