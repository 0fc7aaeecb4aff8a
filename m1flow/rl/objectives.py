"""Policy losses: CISPO, DAPO and GRPO as one token-level objective (the report's unified form).

Every algorithm here optimises, per response token,

    sg(w_t) * A_t * log pi_theta(o_t) * M_t

* CISPO: w = clip(r, 1 - eps_low, 1 + eps_high) (only the importance weight is clipped), M = 1:
  every token keeps its gradient.
* GRPO / DAPO: w = r, and M drops the tokens where PPO's min(r A, clip(r) A) picks the clipped,
  constant branch: A > 0 and r > 1 + eps_high, or A < 0 and r < 1 - eps_low. The gradient is then
  exactly that of the clipped PPO surrogate (d r = r d log pi). GRPO clips symmetrically, DAPO
  decouples eps_low and eps_high ("clip-higher").

Since only the gradient matters, the loss value is -sum(weights * sg(w) A log pi M), not the PPO
surrogate's value. The loss is the negative objective (minimise it).

Normalisation (how token terms are weighted into one number):
* "token": sum over every token of the batch / number of tokens (the report's CISPO formula).
* "sample": mean over each response's tokens, then mean over responses (GRPO's original form).
* "sample_token": our reading of the report's late-stage "sample-level loss combined with
  token-level normalisation": the average of the two losses above. Token normalisation keeps long
  responses' credit; the sample-level half bounds what one response can contribute, which damps
  the pattern collapse where long negative responses pile up negative gradient.

For data-parallel training pass the global token / response counts (`totals`), so each rank's
share of the loss uses the same denominator as the single-process loss.

A mismatch correction (m1flow.rl.correction: token TIS, IcePop, sequence masking) composes with any
of them: one more detached per-token weight, from the proximal and the rollout log-probs.

A policy loss is registered by name with its default clip range (`@register_policy_loss`): a
function from the importance ratio and the advantage to the unified form's (w, M).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from m1flow.registry import Registry
from m1flow.rl.correction import CorrectionConfig
from m1flow.rl.mismatch import correct

Norm = Literal["token", "sample", "sample_token"]
SurrogateWeights = Callable[[Tensor, Tensor, float, float], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class PolicyLossKind:
    """A registered policy loss: (w, M) from (ratio, advantage, eps_low, eps_high), and its default eps."""

    name: str
    weights: SurrogateWeights
    eps_low: float
    eps_high: float


POLICY_LOSSES: Registry[PolicyLossKind] = Registry("policy loss")


def register_policy_loss(name: str, eps_low: float, eps_high: float) -> Callable[[SurrogateWeights], SurrogateWeights]:
    """Decorator: register (w, M) = fn(ratio, adv, eps_low, eps_high) under `name` with its default eps."""
    def add(fn: SurrogateWeights) -> SurrogateWeights:
        POLICY_LOSSES.add(name, PolicyLossKind(name, fn, eps_low, eps_high))
        return fn
    return add


@dataclass(frozen=True)
class LossSpec:
    """A policy loss with its clip range resolved and the normalisation: what an update needs."""

    name: str = "cispo"
    eps_low: float | None = None  # None: the loss's registered default
    eps_high: float | None = None
    norm: Norm = "token"
    correction: CorrectionConfig | None = None  # None or inactive: no mismatch correction

    def __post_init__(self) -> None:
        kind = POLICY_LOSSES.get(self.name)
        object.__setattr__(self, "eps_low", kind.eps_low if self.eps_low is None else self.eps_low)
        object.__setattr__(self, "eps_high", kind.eps_high if self.eps_high is None else self.eps_high)
        if self.norm not in ("token", "sample", "sample_token"):
            raise ValueError(f"unknown norm {self.norm!r}")

    def weights(self, ratio: Tensor, adv: Tensor) -> tuple[Tensor, Tensor]:
        return POLICY_LOSSES.get(self.name).weights(ratio, adv, self.eps_low, self.eps_high)


@dataclass(frozen=True)
class Totals:
    """Counts over the whole (global) minibatch that the normalisation divides by."""

    tokens: float
    samples: float


def local_totals(mask: Tensor) -> Totals:
    """Token count and number of responses with at least one token, of this process's minibatch."""
    per_sample = mask.sum(-1)
    return Totals(tokens=float(per_sample.sum()), samples=float((per_sample > 0).sum()))


def token_weights(mask: Tensor, norm: Norm, totals: Totals | None = None) -> Tensor:
    """Weight of each token in the loss; summing weight * term gives the normalised loss."""
    mask = mask.float()
    totals = totals or local_totals(mask)
    by_token = mask / max(totals.tokens, 1.0)
    lengths = mask.sum(-1, keepdim=True).clamp(min=1.0)
    by_sample = mask / lengths / max(totals.samples, 1.0)
    if norm == "token":
        return by_token
    if norm == "sample":
        return by_sample
    if norm == "sample_token":
        return 0.5 * (by_token + by_sample)
    raise ValueError(f"unknown norm {norm!r}")


def trust_region_mask(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """PPO's implicit mask: 0 where min(rA, clip(r)A) takes the constant clipped branch."""
    drop = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return (~drop).float()


# CISPO: no lower bound on the IS weight (report), and the upper bound DAPO uses, so a side-by-side
# run differs only in the mask.
@register_policy_loss("cispo", eps_low=float("inf"), eps_high=0.28)
def cispo(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> tuple[Tensor, Tensor]:
    """Clip the IS weight, keep every token."""
    return ratio.clamp(min=1 - eps_low, max=1 + eps_high), torch.ones_like(ratio)


def ppo_clipped(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> tuple[Tensor, Tensor]:
    """The unified mask: PPO's clipped surrogate as (w = r, M = trust-region mask)."""
    return ratio, trust_region_mask(ratio, adv, eps_low, eps_high)


register_policy_loss("grpo", eps_low=0.2, eps_high=0.2)(ppo_clipped)  # PPO's symmetric 0.2
register_policy_loss("dapo", eps_low=0.2, eps_high=0.28)(ppo_clipped)  # DAPO's clip-higher


@dataclass(frozen=True)
class TokenObjective:
    """Everything the loss needs per token besides log pi: loss = -sum(coefficients(log pi) * log pi).

    The tensors share one shape (a [N, T] batch, or the flat list of its trained tokens); the
    coefficient of a token is token weight x sg(w) x A x M, which depends on log pi only through
    the detached ratio. The fused LM-head loss evaluates it chunk by chunk.
    """

    old_logp: Tensor
    advantages: Tensor
    token_weight: Tensor  # the normalisation's weight times the mismatch correction's
    loss_spec: LossSpec

    @classmethod
    def build(cls, old_logp: Tensor, advantages: Tensor, mask: Tensor, loss: LossSpec = LossSpec(),
              totals: Totals | None = None, rollout_logp: Tensor | None = None) -> TokenObjective:
        """From [N, T] old (proximal) log-probs and mask and [N] or [N, T] advantages; a mismatch
        correction also needs the rollout's [N, T] log-probs."""
        adv = (advantages[:, None] if advantages.dim() == 1 else advantages).float().expand_as(mask)
        weight = token_weights(mask, loss.norm, totals)
        if loss.correction is not None and loss.correction.active:
            if rollout_logp is None:
                raise ValueError("a mismatch correction needs the rollout's log-probs")
            weight = weight * correct(loss.correction, old_logp, rollout_logp, mask).weight
        return cls(old_logp.float(), adv, weight, loss)

    def select(self, index: Tensor) -> TokenObjective:
        """The objective of the tokens picked by index (a boolean mask or indices), flattened."""
        return TokenObjective(self.old_logp[index], self.advantages[index], self.token_weight[index], self.loss_spec)

    def coefficients(self, logp: Tensor, start: int = 0, end: int | None = None) -> Tensor:
        """Coefficients of tokens start..end (of a flat objective) given their current log-probs."""
        rows = slice(start, end)
        ratio = torch.exp(logp.detach() - self.old_logp[rows])
        adv = self.advantages[rows]
        weight, keep = self.loss_spec.weights(ratio, adv)
        return self.token_weight[rows] * weight * adv * keep

    def loss(self, logp: Tensor) -> Tensor:
        """The loss for log-probs shaped like this objective's tensors (gradient flows through logp)."""
        return -(self.coefficients(logp) * logp).sum()


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    loss: LossSpec = LossSpec(),
    entropy: Tensor | None = None,
    totals: Totals | None = None,
    rollout_logp: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss (negative objective) and statistics for one minibatch of responses.

    logp carries the gradient; old_logp is the proximal policy's log-prob (the behaviour policy's
    when no correction is set); rollout_logp the engine's (for a mismatch correction); mask is 1 on
    trained tokens; advantages is [N] (one per response) or [N, T].
    """
    objective = TokenObjective.build(old_logp, advantages, mask, loss, totals, rollout_logp)
    return objective.loss(logp), policy_stats(logp, objective, mask, entropy)


def policy_stats(logp: Tensor, objective: TokenObjective, mask: Tensor, entropy: Tensor | None = None) -> dict[str, Tensor]:
    """Clipped fractions, mean ratio, PPO-masked fraction, mean |log ratio|, entropy and token count over
    the masked tokens; all are shares of the trained tokens (pos_clip_high_frac: positive advantage and
    ratio above 1 + eps_high), so that minibatches average by their token counts."""
    spec = objective.loss_spec
    ratio = torch.exp(logp.detach() - objective.old_logp)
    _, keep = spec.weights(ratio, objective.advantages)
    mask = mask.float()
    valid = mask > 0
    n = valid.sum().clamp(min=1)
    positive = (objective.advantages > 0) & valid
    above = ratio > 1 + spec.eps_high
    stats = {
        "num_tokens": valid.sum().float(),
        "clip_high_frac": (above & valid).sum() / n,
        "clip_low_frac": ((ratio < 1 - spec.eps_low) & valid).sum() / n,
        "masked_frac": ((keep == 0) & valid).sum() / n,
        "ratio_mean": (ratio * mask).sum() / n,
        # drift from the behaviour policy, and the tokens PPO's clip cuts off and CISPO keeps
        "abs_log_ratio": ((logp.detach() - objective.old_logp).abs() * mask).sum() / n,
        "pos_frac": positive.sum() / n,
        "pos_clip_high_frac": (above & positive).sum() / n,
    }
    if entropy is not None:
        stats["entropy"] = (entropy.detach() * mask).sum() / n
    return stats
