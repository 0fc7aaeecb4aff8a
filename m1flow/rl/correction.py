"""Train/inference mismatch corrections: the `algorithm.correction:` block (settings only, no torch).

The engine samples with its own numerics (bf16 kernels, a perturbed or quantised copy); the learner
recomputes the same tokens in fp32 (`train.old_logp_source: recompute`). The ratio
rho = p_proximal / p_rollout of the two is what the corrections act on, as verl's rollout correction,
SkyRL, NeMo-RL and TRL do (m1flow.rl.mismatch has the arithmetic):

* token TIS: weight each token by min(rho, C), detached;
* IcePop: drop the tokens whose rho leaves [lo, hi] (the others weighted by rho, as verl does);
* sequence masking: drop a whole response whose product (`product`) or geometric mean (`geometric`)
  of rho leaves [lo, hi].

All off by default. The bounds are the configured ones scaled by the monitor's `set_correction`
(`scaled`): a scale s < 1 moves each bound towards 1 (tighter), s > 1 away from it.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Bounds(BaseModel):
    """A ratio interval [lo, hi] around 1."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lo: float = Field(gt=0, description="lower bound of the ratio (> 0)")
    hi: float = Field(gt=0, description="upper bound of the ratio (>= lo)")

    @model_validator(mode="after")
    def _ordered(self) -> Bounds:
        if self.lo > self.hi:
            raise ValueError(f"lo ({self.lo:g}) > hi ({self.hi:g}): the interval is empty")
        return self

    def scaled(self, scale: float) -> Bounds:
        """The interval with each end's distance to 1 (in log space) times `scale`."""
        return Bounds(lo=self.lo ** scale, hi=self.hi ** scale)


class CorrectionConfig(BaseModel):
    """Which mismatch corrections the policy loss applies, and their bounds (None: that one is off)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tis_cap: float | None = Field(None, gt=0, description="token TIS: weight min(rho, C); SkyRL starts at 2")
    icepop: Bounds | None = Field(None, description="IcePop: drop tokens with rho outside [lo, hi]; "
                                                    "SkyRL starts at [0.5, 2]")
    sequence: Literal["product", "geometric"] | None = Field(
        None, description="drop responses whose product or geometric mean of rho leaves sequence_bounds")
    sequence_bounds: Bounds = Field(Bounds(lo=0.99, hi=1.01),
                                    description="the sequence mask's interval (SkyRL's geometric [0.99, 1.01])")

    @property
    def active(self) -> bool:
        return self.tis_cap is not None or self.icepop is not None or self.sequence is not None

    def scaled(self, scale: float) -> CorrectionConfig:
        """The bounds moved by the monitor's scale (see the module's docstring)."""
        if scale <= 0:
            raise ValueError(f"correction scale must be > 0, got {scale}")
        cap = self.tis_cap ** scale if self.tis_cap is not None and self.tis_cap > 1 else self.tis_cap
        return self.model_copy(update={"tis_cap": cap,
                                       "icepop": self.icepop.scaled(scale) if self.icepop else None,
                                       "sequence_bounds": self.sequence_bounds.scaled(scale)})

    def in_force(self) -> dict[str, float]:
        """The bounds set, by name (what the learner publishes beside the shares they produced)."""
        out = {} if self.tis_cap is None else {"tis_cap": self.tis_cap}
        if self.icepop is not None:
            out |= {"icepop_lo": self.icepop.lo, "icepop_hi": self.icepop.hi}
        if self.sequence is not None:
            out |= {"sequence_lo": self.sequence_bounds.lo, "sequence_hi": self.sequence_bounds.hi}
        return out
