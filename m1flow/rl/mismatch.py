"""The arithmetic of the mismatch corrections (m1flow.rl.correction has the settings and why).

rho = p_proximal / p_rollout per token, the proximal log-probs being the learner's recomputed ones
and the rollout's the engine's. The correction is one detached weight per token, multiplied into
the policy loss's own sg(w) A M (m1flow.rl.objectives): CISPO, DAPO and GRPO compose with it
unchanged. Log ratios are clamped to +-20 before exp, as verl does.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from m1flow.rl.correction import CorrectionConfig

SAFETY_BOUND = 20.0


class Parts(NamedTuple):
    """What a correction decided per token ([N, T], on the mask only)."""

    weight: Tensor  # IS weight x kept, detached, 0 off the mask
    truncated: Tensor  # bool: TIS capped the weight
    token_dropped: Tensor  # bool: IcePop dropped the token
    seq_dropped: Tensor  # bool [N]: the sequence mask dropped the response


def _in(x: Tensor, lo: float, hi: float) -> Tensor:
    return (x >= lo) & (x <= hi)


def correct(cfg: CorrectionConfig, proximal_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> Parts:
    """The correction's per-token weight and what it truncated or dropped."""
    valid = mask > 0
    log_ratio = (proximal_logp.detach().float() - rollout_logp.float()).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    log_ratio = torch.where(valid, log_ratio, torch.zeros_like(log_ratio))
    ratio = log_ratio.exp()
    weight = torch.ones_like(ratio)
    truncated = torch.zeros_like(valid)
    if cfg.tis_cap is not None:
        weight, truncated = ratio.clamp(max=cfg.tis_cap), (ratio > cfg.tis_cap) & valid
    elif cfg.icepop is not None:
        weight = ratio  # IcePop keeps the importance weight of the tokens it keeps
    token_dropped = torch.zeros_like(valid)
    if cfg.icepop is not None:
        token_dropped = ~_in(ratio, cfg.icepop.lo, cfg.icepop.hi) & valid
    seq_dropped = torch.zeros(valid.shape[0], dtype=torch.bool, device=valid.device)
    if cfg.sequence is not None:
        stat = log_ratio.sum(-1)
        if cfg.sequence == "geometric":
            stat = stat / valid.sum(-1).clamp(min=1)
        bounds = cfg.sequence_bounds
        seq_dropped = ~_in(stat, math.log(bounds.lo), math.log(bounds.hi)) & valid.any(-1)
    keep = valid & ~token_dropped & ~seq_dropped[:, None]
    return Parts((weight * keep).detach(), truncated, token_dropped, seq_dropped)


# per response: trained tokens, tokens TIS truncated, tokens dropped (IcePop or the sequence mask), the
# response itself (1), truncated (any token), dropped; then over its measured tokens: their count, the
# sums of k1 = log p_rollout - log p_train and k3 = rho - 1 - log rho (KL(rollout || train) estimates,
# as verl's), and of the probabilities' correlation moments x = p_train, y = p_rollout, xx, yy, xy.
ROW_COLUMNS = ("tokens", "truncated", "dropped", "sequences", "truncated_seq", "dropped_seq",
               "measured", "k1", "k3", "x", "y", "xx", "yy", "xy")


def row_sums(cfg: CorrectionConfig | None, proximal_logp: Tensor, rollout_logp: Tensor, mask: Tensor,
             measured: Tensor) -> Tensor:
    """[N, len(ROW_COLUMNS)] float64 sums per response, to be added over responses, sources and ranks.
    `mask`: the trained tokens the correction acts on; `measured`: those the mismatch is measured on
    (the samples the trained version drew: an older one's differ by staleness too)."""
    valid, seen = mask > 0, measured > 0
    has = valid.any(-1)
    if cfg is not None and cfg.active:
        parts = correct(cfg, proximal_logp, rollout_logp, mask)
        truncated, dropped = parts.truncated, parts.token_dropped | (parts.seq_dropped[:, None] & valid)
    else:
        truncated = dropped = torch.zeros_like(valid)
    prox, roll = proximal_logp.detach().double(), rollout_logp.double()
    log_ratio = torch.where(seen, (prox - roll).clamp(-SAFETY_BOUND, SAFETY_BOUND), torch.zeros_like(prox))
    x, y = torch.where(seen, prox.exp(), 0.0), torch.where(seen, roll.exp(), 0.0)
    columns = [valid.sum(-1), truncated.sum(-1), dropped.sum(-1), has, truncated.any(-1) & has,
               dropped.any(-1) & has, seen.sum(-1), -log_ratio.sum(-1),
               torch.where(seen, log_ratio.exp() - 1 - log_ratio, 0.0).sum(-1),
               x.sum(-1), y.sum(-1), (x * x).sum(-1), (y * y).sum(-1), (x * y).sum(-1)]
    return torch.stack([c.double() for c in columns], dim=-1)
