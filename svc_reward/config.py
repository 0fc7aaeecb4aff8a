"""Settings of the reward service."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from m1flow.runtime.config import ServiceConfig
from svc_reward.genrm.config import CalibrationConfig, GenRMConfig, NativeJudgeConfig, OpenAIJudgeConfig
from svc_reward.verifiers.code import CodeRewardConfig
from svc_reward.verifiers.math import MathVerifyConfig

JudgeBackend = Literal["", "openai", "native", "length", "quality"]


class RewardConfig(ServiceConfig):
    """svc_reward: scores rollouts and completes groups (rewards, their parts, verdicts); no more."""

    group_timeout_s: float = Field(60.0, description="score a group with what arrived after this long")
    scoring_threads: int = Field(4, description="concurrent scoring jobs (slow sandbox calls overlap)")
    sandbox_address: str = Field("", description="svc_sandbox gRPC address for code and SWE tasks")
    math: MathVerifyConfig = Field(default_factory=MathVerifyConfig, description="the math-verify worker pool")
    code: CodeRewardConfig = Field(default_factory=CodeRewardConfig, description="code tasks: scoring mode, limits")
    genrm_judge: JudgeBackend = Field(
        "", description="GenRM judge: openai (an HTTP endpoint), native (a checkpoint), or the heuristic "
                        "length/quality judges for tests and CPU demos; empty: genrm tasks are not scored")
    genrm_openai: OpenAIJudgeConfig = Field(default_factory=OpenAIJudgeConfig,
                                            description="endpoint of the openai judge (base_url, model, ...)")
    genrm_checkpoint: str = Field("", description="policy directory (or file:// URI) of the native judge")
    genrm_native: NativeJudgeConfig = Field(default_factory=NativeJudgeConfig, description="native judge sampling")
    genrm_margin: float = Field(0.0, ge=0.0, description="heuristic judges: value gap below which answers tie")
    genrm_length_bonus: float = Field(0.0, description="quality judge: value added per character of answer")
    genrm_bonus_after: int = Field(0, ge=0, description="quality judge: the length bonus starts after this many "
                                                        "judgements (a judge that drifts mid-run, for tests)")
    genrm: GenRMConfig = Field(default_factory=GenRMConfig, description="pairwise comparison and Swiss rounds")
    genrm_calibration: CalibrationConfig = Field(default_factory=CalibrationConfig,
                                                 description="length-controlled recalibration fit")
