"""The update loop: several off-policy minibatch updates on one batch (`train_on_batch`).

The report reuses each generation batch for 16 minibatch updates; after the first, the policy has
moved away from the one that sampled the tokens, which is what the clipped IS weight (CISPO) or the
trust-region mask (GRPO/DAPO) handles. The batch arrives selected and built (m1flow.rl.selection,
svc_learner.batching); the loss is m1flow.rl.objectives'. This module knows nothing of Kafka.

The model is anything with hidden_states(input_ids) -> [N, T, D] and lm_head.weight [V, D].

Alignment convention: every [N, T] tensor is indexed like input_ids. rollout_logp[:, t] is the
inference-mode log-prob of token input_ids[:, t] (0 on prompt and padding); the model's hidden
state at position t - 1 predicts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from m1flow.rl.objectives import LossSpec, TokenObjective, Totals, policy_stats
from .batching import Batch
from .logprobs import fused_head_loss
from .optim import EPS, clip_gradients
from .precision import HeadDtype, cast_head, correlation_moments, head_logprobs, pearson_from_moments

LAST_ABS_LOG_RATIO, LAST_NUM_TOKENS = "_last_abs_log_ratio", "_last_num_tokens"  # reduced with the sums


class LearnerConfig(BaseModel):
    """How a batch is trained on (optimizer, updates, LM head); what is trained on is `algorithm`."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-4, gt=0)
    weight_decay: float = 0.0
    adam_eps: float = Field(EPS, gt=0, description="AdamW eps (report: 1e-15; see svc_learner.optim)")
    minibatches: int = Field(4, ge=1, description="off-policy updates per batch (report: 16)")
    grad_clip: float | None = Field(1.0, description="max global grad norm; None: no clipping")
    old_logp_source: Literal["rollout", "recompute"] = "rollout"
    head_dtype: HeadDtype = "fp32"
    logprob_chunk: int | None = Field(None, description="tokens per head chunk; None: bounded by bytes")
    fused_loss: bool = Field(True, description="form the loss gradient inside the chunked LM head "
                             "(3 head matmuls instead of 4); False: log-probs first, then the loss")
    drift_limit: float | None = Field(
        None, description="warn when the last minibatch's mean |log ratio| exceeds this; None: the policy "
                          "loss's own limit (svc_learner.drift)")


@dataclass(frozen=True)
class Ranks:
    """Where this process sits among data-parallel ranks; single process by default."""

    rank: int = 0
    world: int = 1

    def sum(self, x: Tensor) -> Tensor:
        """Sum of x over all ranks (identity for one process)."""
        return x


class ScoredTokens(NamedTuple):
    """[N, T] log-probs and entropies aligned with input_ids (0 off the response), and the loss if asked."""

    logp: Tensor
    entropy: Tensor
    loss: Tensor | None


class SequenceLogprobs(nn.Module):
    """Wraps a model exposing hidden_states(input_ids) and lm_head.weight into [N, T] token log-probs.

    Given a TokenObjective it also returns the loss, through the fused head when `fused` (the
    gradient is then formed chunk by chunk in the forward pass). An nn.Module so that
    DistributedDataParallel can wrap the whole computation.
    """

    def __init__(self, model: nn.Module, head_dtype: HeadDtype = "fp32", chunk_size: int | None = None,
                 fused: bool = True):
        super().__init__()
        self.model = model
        self.head_dtype = head_dtype
        self.chunk_size = chunk_size
        self.fused = fused

    def forward(self, input_ids: Tensor, response_mask: Tensor, objective: TokenObjective | None = None) -> ScoredTokens:
        hidden = self.model.hidden_states(input_ids)[:, :-1]
        sel = response_mask[:, 1:].bool()
        weight, targets = self.model.lm_head.weight, input_ids[:, 1:][sel]
        if objective is not None and self.fused:
            flat = objective.select(torch.cat([torch.zeros_like(sel[:, :1]), sel], dim=1))
            h, w = cast_head(hidden[sel], weight, self.head_dtype)
            loss, logp, entropy = fused_head_loss(h, w, targets, flat.coefficients, self.chunk_size, return_entropy=True)
            return ScoredTokens(_scatter_tokens(logp, sel), _scatter_tokens(entropy, sel), loss)
        logp, entropy = head_logprobs(hidden[sel], weight, targets, self.head_dtype, self.chunk_size, return_entropy=True)
        logp, entropy = _scatter_tokens(logp, sel), _scatter_tokens(entropy.detach(), sel)
        return ScoredTokens(logp, entropy, objective.loss(logp) if objective is not None else None)


def _scatter_tokens(values: Tensor, sel: Tensor) -> Tensor:
    shifted = torch.zeros(sel.shape, dtype=values.dtype, device=values.device).masked_scatter(sel, values)
    return torch.cat([torch.zeros_like(shifted[:, :1]), shifted], dim=1)


def trainable_mask(batch: Batch) -> Tensor:
    """Response tokens a model can score (position 0 has no preceding state)."""
    mask = batch.response_mask.float().clone()
    mask[:, 0] = 0
    return mask


def drop_empty_grads(params: list[nn.Parameter]) -> None:
    """A parameter no token reached (an MoE expert nobody routed to) is not stepped.

    Single-process autograd leaves its grad None; DDP fills it with zeros, and AdamW would still
    move it by its momentum. Treating all-zero grads as None makes both paths take the same step.
    """
    live = [p for p in params if p.grad is not None]
    if not live:
        return
    for p, reached in zip(live, torch.stack([p.grad.any() for p in live]).tolist()):  # one device sync
        if not reached:
            p.grad = None


def minibatch_indices(n: int, minibatches: int, ranks: Ranks) -> list[Tensor]:
    """This rank's share of each minibatch: global minibatch j is the same for any world size.

    Fewer minibatches when the batch is small, so that every rank gets a sample of every one (a rank
    skipping a backward would hang the others).
    """
    count = min(minibatches, n // ranks.world)
    return [chunk[ranks.rank :: ranks.world] for chunk in torch.arange(n).tensor_split(count)] if count else []


def _recompute_old_logp(scorer: nn.Module, batch: Batch, parts: list[Tensor]) -> Tensor:
    old = torch.zeros_like(batch.rollout_logp, dtype=torch.float32)
    with torch.no_grad():
        for idx in parts:
            old[idx] = scorer(batch.input_ids[idx], batch.response_mask[idx])[0]
    return old


def run_updates(
    scorer: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: LearnerConfig,
    loss_spec: LossSpec,
    ranks: Ranks = Ranks(),
) -> dict[str, float]:
    """train_on_batch for an already wrapped scorer (SequenceLogprobs, or DDP around one)."""
    parts = minibatch_indices(len(batch), cfg.minibatches, ranks)
    if not parts:
        return {"updates": 0}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    recompute = cfg.old_logp_source == "recompute"
    old_all = _recompute_old_logp(scorer, batch, parts) if recompute else batch.rollout_logp.float()
    sums: dict[str, Tensor] = {}
    corr_moments = None
    for step, idx in enumerate(parts):
        mb = batch.select(idx)
        mask = trainable_mask(mb)
        counts = ranks.sum(torch.stack([mask.sum(), (mask.sum(-1) > 0).sum().float()]))
        objective = TokenObjective.build(old_all[idx], mb.advantages, mask, loss_spec,
                                         Totals(float(counts[0]), float(counts[1])))
        logp, entropy, loss = scorer(mb.input_ids, mb.response_mask, objective)
        mb_stats = policy_stats(logp, objective, mask, entropy)
        if step == 0:  # the policy that scored minibatch 0 is still the one the batch was handed
            corr_moments = correlation_moments(logp, mb.rollout_logp, mask)
        optimizer.zero_grad(set_to_none=True)
        (loss * ranks.world).backward()  # DDP averages gradients over ranks; we want their sum
        drop_empty_grads(params)
        grad_norm = clip_gradients(params, cfg.grad_clip)
        optimizer.step()
        n_tok = mb_stats["num_tokens"]
        for key, value in mb_stats.items():
            sums[key] = sums.get(key, 0.0) + (value if key == "num_tokens" else value * n_tok).detach()
        sums["loss"] = sums.get("loss", 0.0) + loss.detach()
        sums["grad_norm"] = sums.get("grad_norm", 0.0) + grad_norm / ranks.world
        if step == len(parts) - 1:  # the most off-policy minibatch: every other update came before it
            sums[LAST_ABS_LOG_RATIO] = (mb_stats["abs_log_ratio"] * n_tok).detach()
            sums[LAST_NUM_TOKENS] = n_tok.detach()
    if recompute:  # the recomputed pass saw the whole batch before any update
        local = torch.cat(parts)
        corr_moments = correlation_moments(old_all[local], batch.rollout_logp[local], trainable_mask(batch)[local])
    keys = sorted(sums)
    totals = ranks.sum(torch.stack([torch.as_tensor(sums[k], dtype=torch.float64) for k in keys]))
    reduced = dict(zip(keys, totals.tolist()))
    n_tok = max(reduced["num_tokens"], 1.0)
    last_abs, last_tokens = reduced.pop(LAST_ABS_LOG_RATIO), reduced.pop(LAST_NUM_TOKENS)
    out: dict[str, float] = {"updates": len(parts)}
    for key, value in reduced.items():
        if key in ("loss", "grad_norm"):
            out[key] = value / len(parts)
        elif key == "num_tokens":
            out[key] = value
        else:
            out[key] = value / n_tok
    out["drift_abs_log_ratio_last"] = last_abs / max(last_tokens, 1.0)
    out["pos_clip_high_share"] = out["pos_clip_high_frac"] / out["pos_frac"] if out["pos_frac"] > 0 else 0.0
    out["train_infer_corr"] = pearson_from_moments(ranks.sum(corr_moments))
    return out


def train_on_batch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: LearnerConfig,
    loss_spec: LossSpec = LossSpec(),
) -> dict[str, float]:
    """Optionally recompute old log-probs, run cfg.minibatches updates of loss_spec; return stats."""
    scorer = SequenceLogprobs(model, cfg.head_dtype, cfg.logprob_chunk, cfg.fused_loss)
    return run_updates(scorer, optimizer, batch, cfg, loss_spec)
