"""The one block that chooses the algorithm: `algorithm:` in the learner's config."""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from m1flow.contracts import events
from m1flow.rl.advantages import ADVANTAGE_ESTIMATORS
from m1flow.rl.correction import CorrectionConfig
from m1flow.rl.selection import Selected, Skipped, select_group
from m1flow.rl.shaping import ShapingConfig

if TYPE_CHECKING:
    from m1flow.rl.objectives import LossSpec


class AlgorithmConfig(BaseModel):
    """Advantage estimator, policy loss, sample selection and reward shaping, each by name or value."""

    model_config = ConfigDict(extra="forbid")

    advantage: str = Field("grpo", description="advantage estimator: grpo, dr_grpo, rloo")
    policy_loss: str = Field("cispo", description="policy loss: cispo, dapo, grpo")
    eps_low: float | None = Field(None, description="clip range below 1; None: the policy loss's default")
    eps_high: float | None = Field(None, description="clip range above 1; None: the policy loss's default")
    loss_norm: Literal["token", "sample", "sample_token"] = Field(
        "token", description="token: over all tokens; sample: per response, then over responses; "
                             "sample_token: the average of both")
    max_staleness: int = Field(2, ge=0, description="leave out samples more policy versions old than this")
    dynamic_sampling: bool = Field(True, description="skip groups whose shaped rewards are all equal")
    shaping: ShapingConfig = Field(default_factory=ShapingConfig, description="format reward, overlong penalty")
    correction: CorrectionConfig = Field(
        default_factory=CorrectionConfig, description="train/inference mismatch corrections (token TIS, IcePop, "
                                                      "sequence masking); need train.old_logp_source: recompute")

    @field_validator("advantage")
    @classmethod
    def _known_advantage(cls, name: str) -> str:
        ADVANTAGE_ESTIMATORS.get(name)
        return name

    @field_validator("policy_loss")
    @classmethod
    def _known_policy_loss(cls, name: str) -> str:
        from m1flow.rl.objectives import POLICY_LOSSES  # torch, only where a loss is configured

        POLICY_LOSSES.get(name)
        return name

    def loss(self, correction_scale: float = 1.0) -> LossSpec:
        """The loss; the correction's bounds scaled as the monitor last asked (m1flow.rl.correction)."""
        from m1flow.rl.objectives import LossSpec

        correction = self.correction.scaled(correction_scale) if self.correction.active else None
        return LossSpec(self.policy_loss, self.eps_low, self.eps_high, self.loss_norm, correction)

    def select(self, group: events.ScoredGroup, current_version: int) -> Selected | Skipped:
        return select_group(group, current_version, estimator=self.advantage, max_staleness=self.max_staleness,
                            dynamic_sampling=self.dynamic_sampling, shaping=self.shaping)
