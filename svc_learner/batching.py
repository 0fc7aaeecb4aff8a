"""Selected groups (m1flow.rl.selection) into the tensors one learner step trains on.

Alignment convention: every [N, T] tensor is indexed like input_ids. rollout_logp[:, t] is the
inference-mode log-prob of token input_ids[:, t] (0 on prompt and padding); the model's hidden
state at position t - 1 predicts it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from m1flow.contracts import events
from m1flow.group_totals import GroupTotals
from m1flow.rl.selection import Selected


@dataclass
class Batch:
    """N sequences (prompt + response, right-padded), each with its advantage."""

    input_ids: Tensor  # [N, T] long
    response_mask: Tensor  # [N, T] 1 on generated tokens to train on
    rollout_logp: Tensor  # [N, T] inference-mode log-prob of each token (see module docstring)
    advantages: Tensor  # [N]
    policy_version: Tensor  # [N] long, version of the policy that sampled it
    group_ids: Tensor  # [N] long, index of its group in the batch
    temperature: Tensor | None = None  # [N] the temperature each was sampled at (None: all 1.0)
    # [N, T, layers, k] experts to replay, -1: own routing (None: no replay). Stays on the host (layers x k
    # times the tokens' size): each micro-batch takes its rows to the device (svc_learner.update)
    routed_experts: Tensor | None = None

    def __post_init__(self) -> None:
        if self.temperature is None:
            self.temperature = torch.ones(len(self))

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: Tensor) -> Batch:
        return Batch(**{f.name: None if (v := getattr(self, f.name)) is None else v[index.to(v.device)]
                        for f in fields(self)})

    def to(self, device: torch.device) -> Batch:
        host = ("routed_experts",)
        return Batch(**{f.name: v if (v := getattr(self, f.name)) is None or f.name in host else v.to(device)
                        for f in fields(self)})


def pack_sequences(prompts: list[list[int]], responses: list[list[int]], logprobs: list[list[float]],
                   pad_id: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded (input_ids, response_mask, rollout_logp) [N, T] in the alignment above."""
    n, width = len(prompts), max(len(p) + len(r) for p, r in zip(prompts, responses))
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask, logp = torch.zeros(n, width), torch.zeros(n, width)
    for row, (p, r, lp) in enumerate(zip(prompts, responses, logprobs)):
        end = len(p) + len(r)
        input_ids[row, :end] = torch.tensor(p + r, dtype=torch.long)
        mask[row, len(p) : end] = 1.0
        logp[row, len(p) : end] = torch.tensor(lp, dtype=torch.float32)
    return input_ids, mask, logp


def _rows(selected: Sequence[Selected]) -> list[tuple[int, events.ScoredSample, float]]:
    """(group index, sample, advantage) of each row of the batch, in order."""
    return [(gi, sel.group.samples[i], adv) for gi, sel in enumerate(selected)
            for i, adv in zip(sel.samples, sel.advantages)]


def samples_of(selected: Sequence[Selected]) -> list[events.ScoredSample]:
    """The batch's samples, one per row of to_batch's tensors."""
    return [s for _, s, _ in _rows(selected)]


def to_batch(selected: Sequence[Selected], pad_id: int = 0) -> Batch:
    """The selected samples of each group, in order, with their advantages."""
    rows = _rows(selected)
    if not rows:
        raise ValueError("no selected samples to build a batch from")
    input_ids, mask, logp = pack_sequences([list(s.prompt_token_ids) for _, s, _ in rows],
                                           [list(s.token_ids) for _, s, _ in rows],
                                           [list(s.logprobs) for _, s, _ in rows], pad_id)
    return Batch(
        input_ids=input_ids, response_mask=mask, rollout_logp=logp,
        advantages=torch.tensor([adv for _, _, adv in rows], dtype=torch.float32),
        policy_version=torch.tensor([s.policy_version for _, s, _ in rows], dtype=torch.long),
        group_ids=torch.tensor([gi for gi, _, _ in rows], dtype=torch.long),
        temperature=torch.tensor([s.temperature or 1.0 for _, s, _ in rows], dtype=torch.float32))


def batch_stats(selected: Sequence[Selected]) -> dict[str, float]:
    """What a batch was made of, for metrics and the monitor: rewards as scored and as shaped, sizes."""
    stats = GroupTotals.of(sel.group for sel in selected).means()
    rewards = [r for sel in selected for r in sel.rewards]
    left_out: dict[str, int] = {}
    for sel in selected:
        for reason, n in sel.counts.items():
            left_out[reason] = left_out.get(reason, 0) + n
    return {**stats, "groups": float(len(selected)), "samples": float(len(rewards)),
            "shaped_reward_mean": sum(rewards) / max(1, len(rewards)),
            **{f"samples_left_out_{reason}": float(n) for reason, n in sorted(left_out.items())}}
