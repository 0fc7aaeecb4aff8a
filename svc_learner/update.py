"""The update loop: several off-policy minibatch updates on one batch (`train_on_batch`).

The report reuses each generation batch for 16 minibatch updates; after the first, the policy has
moved away from the one that sampled the tokens, which is what the clipped IS weight (CISPO) or the
trust-region mask (GRPO/DAPO) handles. The batch arrives selected and built (m1flow.rl.selection,
svc_learner.batching); the loss is m1flow.rl.objectives'. This module knows nothing of Kafka.

The model is any causal LM m1flow.lm supports: the hybrid model or a transformers one (Qwen2,
Llama, ...), whose logits are its final hidden states times the LM head (run here in fp32).

Which log-probs: those of the temperature the sample was drawn at, softmax(logits / T) over the
whole vocabulary. The engines report their log-probs under the distribution they sampled from,
temperature *and* top-p nucleus renormalised (m1flow.sampling). The temperature is applied here
too (it is differentiable, and it is the policy's own distribution at that temperature); the nucleus
is not: it is a per-token, non-differentiable cut of the vocabulary, and off-policy a sampled
token may fall outside the learner's nucleus (log-prob -inf). The two therefore differ by the log
of the nucleus mass, at most -log(top_p) nats per token (0.051 at the default 0.95), and equal with
top_p = 1. `old_logp_source: recompute` takes the old log-probs from this same computation.

Alignment convention: every [N, T] tensor is indexed like input_ids. rollout_logp[:, t] is the
inference-mode log-prob of token input_ids[:, t] (0 on prompt and padding); the model's hidden
state at position t - 1 predicts it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from m1flow import lm
from m1flow.model.routing import replaying
from m1flow.rl.mismatch import row_sums
from m1flow.rl.objectives import LossSpec, TokenObjective, Totals, policy_stats

from . import packing
from .batching import Batch
from .logprobs import fused_head_loss, token_logprobs
from .optim import EPS, clip_gradients
from .packing import PackingMode
from .placement import ModelDtype
from .precision import HeadDtype, cast_head
from .step_stats import StepStats

class TrainConfig(BaseModel):
    """The learner's `train:` block: how a batch is trained on (optimizer, updates, LM head); what
    is trained on is `algorithm`."""

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
    max_tokens_per_micro_batch: int | None = Field(
        8192, ge=1, description="tokens per forward/backward (gradients accumulate over a minibatch's micro-"
                                "batches); None: the whole minibatch as one padded forward")
    packing: PackingMode = Field(
        "auto", description="micro-batches as packed rows (no padding) or padded rows: auto packs only where "
                            "attention is varlen (flash attention); under sdpa/eager a packed row attends "
                            "through a dense mask over all its tokens (svc_learner.packing)")
    fsdp: bool = Field(False, description="several ranks: shard parameters, gradients and optimizer state "
                       "(FSDP2 fully_shard per decoder layer) instead of replicating them (DDP)")
    activation_checkpointing: bool = Field(False, description="recompute each decoder layer's activations in "
                                           "the backward pass instead of keeping them")
    dtype: ModelDtype = Field("auto", description="weights: auto (bf16 on CUDA, fp32 on CPU), fp32, bf16; "
                              "the LM head stays fp32")
    routing_replay: bool = Field(
        False, description="MoE (the hybrid model): compute each sample's MoE with the experts its engine "
                           "recorded (Rollout.routed_experts, R3), the gate still trained; a sample without a "
                           "fitting record is routed by the learner and counted")
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

    def max(self, x: Tensor) -> Tensor:
        """Maximum of x over all ranks (identity for one process)."""
        return x


class ScoredTokens(NamedTuple):
    """[N, T] log-probs and entropies aligned with input_ids (0 off the response), and the loss if asked."""

    logp: Tensor
    entropy: Tensor
    loss: Tensor | None


class SequenceLogprobs(nn.Module):
    """Wraps a causal LM (m1flow.lm: the hybrid model or a transformers one) into [N, T] token log-probs.

    Given a TokenObjective it also returns the loss, through the fused head when `fused` (the
    gradient is then formed chunk by chunk in the forward pass). An nn.Module so that
    DistributedDataParallel can wrap the whole computation.
    """

    def __init__(self, model: nn.Module, head_dtype: HeadDtype = "fp32", chunk_size: int | None = None,
                 fused: bool = True, pack: bool = False):
        super().__init__()
        self.model = model
        self.head_dtype = head_dtype
        self.chunk_size = chunk_size
        self.fused = fused
        self.packs = pack and packing.can_pack(model)

    @classmethod
    def configured(cls, model: nn.Module, cfg: TrainConfig) -> SequenceLogprobs:
        return cls(model, cfg.head_dtype, cfg.logprob_chunk, cfg.fused_loss,
                   pack=cfg.max_tokens_per_micro_batch is not None and packing.packs(model, cfg.packing))

    def forward(self, input_ids: Tensor, response_mask: Tensor, objective: TokenObjective | None = None,
                temperature: Tensor | None = None) -> ScoredTokens:
        """Rows are cut to the longest real one (packed into one row when `packs`); outputs keep [N, T]."""
        n, full = input_ids.shape
        row_lengths = packing.lengths(response_mask)
        width = int(row_lengths.max())
        input_ids, response_mask = input_ids[:, :width], response_mask[:, :width]
        if self.packs:
            hidden = packing.packed_hidden_states(self.model, input_ids, row_lengths)[:, :-1]
        else:
            hidden = lm.hidden_states(self.model, input_ids)[:, :-1]
        sel = response_mask[:, 1:].bool()
        scored = torch.zeros(n, full, dtype=torch.bool, device=sel.device)
        scored[:, 1:width] = sel  # the tokens scored, in the caller's [N, T] layout
        weight, targets = lm.head_weight(self.model), input_ids[:, 1:][sel]
        h, w = cast_head(hidden[sel], weight, self.head_dtype)
        if temperature is not None and bool((temperature != 1).any()):
            # logits / T == (h / T) @ w.T: the distribution the engine sampled from (see module doc)
            h = h / temperature.to(h.device, h.dtype)[:, None].expand(sel.shape)[sel][:, None]
        if objective is not None and self.fused:
            flat = objective.select(scored)
            loss, logp, entropy = fused_head_loss(h, w, targets, flat.coefficients, self.chunk_size, return_entropy=True)
            return ScoredTokens(_scatter_tokens(logp, scored), _scatter_tokens(entropy, scored), loss)
        logp, entropy = token_logprobs(h, w, targets, self.chunk_size, return_entropy=True)
        logp, entropy = _scatter_tokens(logp, scored), _scatter_tokens(entropy.detach(), scored)
        return ScoredTokens(logp, entropy, objective.loss(logp) if objective is not None else None)


def _scatter_tokens(values: Tensor, scored: Tensor) -> Tensor:
    return torch.zeros(scored.shape, dtype=values.dtype, device=values.device).masked_scatter(scored, values)


def trainable_mask(batch: Batch) -> Tensor:
    """Response tokens a model can score (position 0 has no preceding state)."""
    mask = batch.response_mask.float().clone()
    mask[:, 0] = 0
    return mask


def drop_empty_grads(params: list[nn.Parameter], ranks: Ranks = Ranks()) -> None:
    """A parameter no token reached (an MoE expert nobody routed to) is not stepped.

    Single-process autograd leaves its grad None; DDP fills it with zeros, and AdamW would still
    move it by its momentum. Treating all-zero grads as None makes both paths take the same step.
    Under FSDP each rank holds a shard of each gradient: a parameter counts as reached when any
    rank's shard is non-zero.
    """
    live = [p for p in params if p.grad is not None]
    if not live:
        return
    local = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in live]
    reached = torch.stack([g.any() for g in local])
    if any(hasattr(p.grad, "to_local") for p in live):
        reached = ranks.max(reached.int()).bool()
    for p, hit in zip(live, reached.tolist()):  # one device sync
        if not hit:
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
            with replaying(scorer, _experts(batch, idx)):
                old[idx] = scorer(batch.input_ids[idx], batch.response_mask[idx], None, batch.temperature[idx])[0]
    return old


def forward_backward(scorer: nn.Module, mb: Batch, objective: TokenObjective, budget: int | None,
                     ranks: Ranks) -> ScoredTokens:
    """Gradients of one minibatch, accumulated over micro-batches of at most `budget` tokens
    (svc_learner.packing); its detached log-probs, entropies and loss. Gradients are exchanged
    between ranks once, on each rank's last micro-batch."""
    inner = getattr(scorer, "module", scorer)  # the SequenceLogprobs inside DDP
    groups = packing.micro_batches(packing.lengths(mb.response_mask).tolist(), budget, inner.packs)
    real = len(groups)
    if getattr(scorer, "sharded", False):  # FSDP gathers weights in every forward: same count on all ranks
        count = int(ranks.max(torch.tensor(real, device=mb.input_ids.device)))
        groups += [groups[-1]] * (count - real)  # repeated with zero weight: collectives only
    logp = torch.zeros_like(mb.rollout_logp, dtype=torch.float32)
    entropy, loss = torch.zeros_like(logp), torch.zeros((), device=logp.device)
    for i, rows in enumerate(groups):
        last = i == len(groups) - 1
        with contextlib.nullcontext() if last or not hasattr(scorer, "no_sync") else scorer.no_sync():
            index = torch.tensor(rows, device=logp.device)
            part_objective = objective.select(index)
            if i >= real:
                part_objective = replace(part_objective, token_weight=torch.zeros_like(part_objective.token_weight))
            with replaying(scorer, _experts(mb, index)):  # the backward too: checkpointed layers recompute
                part = scorer(mb.input_ids[index], mb.response_mask[index], part_objective, mb.temperature[index])
                (part.loss * ranks.world).backward()  # DDP/FSDP average gradients over ranks; we want their sum
        if i < real:
            logp[index], entropy[index] = part.logp.detach().float(), part.entropy.detach().float()
            loss = loss + part.loss.detach()
    return ScoredTokens(logp, entropy, loss)


def _experts(batch: Batch, index: Tensor) -> Tensor | None:
    """The rows' experts to replay (R3) on the rows' device, or None."""
    if batch.routed_experts is None:
        return None
    return batch.routed_experts[index.to(batch.routed_experts.device)].to(batch.input_ids.device)


def _objective(old_logp: Tensor, mb: Batch, mask: Tensor, loss_spec: LossSpec, ranks: Ranks) -> TokenObjective:
    """The minibatch's token objective, normalised by the trained tokens and samples of every rank."""
    counts = ranks.sum(torch.stack([mask.sum(), (mask.sum(-1) > 0).sum().float()]))
    return TokenObjective.build(old_logp, mb.advantages, mask, loss_spec, Totals(float(counts[0]), float(counts[1])),
                                mb.rollout_logp)


def run_updates(
    scorer: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: TrainConfig,
    loss_spec: LossSpec,
    ranks: Ranks = Ranks(),
    stats: StepStats | None = None,
    version: int | None = None,
) -> dict[str, float]:
    """train_on_batch for an already wrapped scorer (SequenceLogprobs, or DDP around one); the step's
    statistics, added to `stats` (a fresh StepStats by default) and reduced once.

    `version`: the policy version of the weights handed in. The train/inference correlation is then
    measured on the samples that version drew only: a sample of an older version differs from these
    weights by the updates since, which is staleness, not precision (a pipeline's samples mostly are
    one to three versions old). None: every sample (an on-policy loop)."""
    stats = StepStats() if stats is None else stats
    parts = minibatch_indices(len(batch), cfg.minibatches, ranks)
    if not parts:
        stats.note(updates=0)
        return stats.values
    batch = batch.to(next(scorer.parameters()).device)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    recompute = cfg.old_logp_source == "recompute"
    old_logp = _recompute_old_logp(scorer, batch, parts) if recompute else batch.rollout_logp.float()
    for step, idx in enumerate(parts):
        mb = batch.select(idx)
        mask = trainable_mask(mb)
        objective = _objective(old_logp[idx], mb, mask, loss_spec, ranks)
        optimizer.zero_grad(set_to_none=True)
        logp, entropy, loss = forward_backward(scorer, mb, objective, cfg.max_tokens_per_micro_batch, ranks)
        drop_empty_grads(params, ranks)
        grad_norm = clip_gradients(params, cfg.grad_clip)
        optimizer.step()
        stats.add(policy_stats(logp, objective, mask, entropy), loss, grad_norm / ranks.world, last=step == len(parts) - 1)
        if step == 0 and not recompute:  # the policy that scored minibatch 0 is still the one the batch was handed
            rows = row_sums(None, logp, mb.rollout_logp, mask, _drawn_by(mb, mask, version))
            stats.mismatch(rows, idx, len(batch), corrected=False)
    if recompute:  # the recomputed pass saw the whole batch before any update: the corrections' proximal
        local, mask = torch.cat(parts), trainable_mask(batch)
        rows = row_sums(loss_spec.correction, old_logp[local], batch.rollout_logp[local], mask[local],
                        _drawn_by(batch, mask, version)[local])
        stats.mismatch(rows, local, len(batch), corrected=loss_spec.correction is not None)
    return stats.reduce(len(parts), ranks, batch.input_ids.device)  # one device for NCCL (CUDA tensors only)


def _drawn_by(batch: Batch, mask: Tensor, version: int | None) -> Tensor:
    """The mask restricted to the samples `version` drew (all of them when version is None)."""
    if version is None:
        return mask
    return mask * (batch.policy_version.to(mask.device) == version).unsqueeze(-1).to(mask.dtype)


def train_on_batch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: TrainConfig,
    loss_spec: LossSpec = LossSpec(),
) -> dict[str, float]:
    """Optionally recompute old log-probs, run cfg.minibatches updates of loss_spec; return stats."""
    scorer = SequenceLogprobs.configured(model, cfg)
    return run_updates(scorer, optimizer, batch, cfg, loss_spec)
