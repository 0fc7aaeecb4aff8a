"""Micro-batches by token budget, and packed sequences for the models that take them.

A minibatch of right-padded rows is cut, in order, into micro-batches of at most
`max_tokens_per_micro_batch` tokens, whose gradients add up before the optimizer step. A micro-batch
runs either as padded rows (trimmed to its longest sample, not the minibatch's) or, for a
transformers model, as one packed row: the samples concatenated, position_ids restarting at 0 for
each, which transformers turns into attention that never crosses a sample boundary. Packing pays
only where attention runs the packed row as varlen kernels (flash attention): under sdpa or eager,
transformers builds a dense block-diagonal mask over the whole row, so attention costs (sum of
lengths)^2 instead of the padded rows' n x longest^2 (bench/learning.py's minibatches of 32 samples
of ~23 tokens: a training batch 1.7x slower packed, see `packs`). The hybrid model's lightning
attention carries a recurrent state through the row and takes no position_ids: it always runs padded
rows. Only the model body is packed; the head and the objective see the usual [N, T] layout (and run
on response tokens only), so the loss is the padded one, term for term.
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

PackingMode = Literal["auto", "packed", "padded"]


def can_pack(model: nn.Module) -> bool:
    """Whether the model takes packed rows (transformers models do; the hybrid model does not)."""
    return not hasattr(model, "hidden_states")


def varlen_attention(model: nn.Module) -> bool:
    """Whether the model's attention runs a packed row sample by sample (flash attention's varlen
    kernels) rather than through a dense mask over the whole row (sdpa, eager)."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None) or ""
    return "flash" in str(impl)


def packs(model: nn.Module, mode: PackingMode) -> bool:
    """Whether micro-batches run as packed rows. auto: only where attention is varlen (measured on
    2 CPU cores, sdpa, 64 samples of 23 tokens in 2 minibatches: 0.185 s a batch packed against 0.111
    padded, the same loss to 1e-8); packed / padded: as asked (packed still only where the model takes it)."""
    if mode == "padded" or not can_pack(model):
        return False
    return mode == "packed" or varlen_attention(model)


def lengths(response_mask: Tensor) -> Tensor:
    """[N] tokens per right-padded row: prompt and response, the response ending the sample."""
    width = response_mask.shape[1]
    has = response_mask.bool().any(-1)
    last = width - 1 - response_mask.bool().flip(-1).int().argmax(-1)
    return torch.where(has, last + 1, torch.full_like(last, width))


def micro_batches(row_lengths: list[int], budget: int | None, packed: bool) -> list[list[int]]:
    """Consecutive rows, each group within `budget` tokens (packed: their sum; padded: rows x the
    longest); a row longer than the budget goes alone. None: all rows at once."""
    if budget is None or not row_lengths:
        return [list(range(len(row_lengths)))] if row_lengths else []
    out: list[list[int]] = [[]]
    used = longest = 0
    for i, n in enumerate(row_lengths):
        cost = used + n if packed else (len(out[-1]) + 1) * max(longest, n)
        if out[-1] and cost > budget:
            out.append([])
            used = longest = 0
        out[-1].append(i)
        used, longest = used + n, max(longest, n)
    return out


def packed_hidden_states(model: nn.Module, input_ids: Tensor, row_lengths: Tensor) -> Tensor:
    """[N, T, hidden] final hidden states of each row's real tokens (0 on padding), computed as one
    packed row with position_ids restarting per sample."""
    n, width = input_ids.shape
    real = torch.arange(width, device=input_ids.device)[None, :] < row_lengths[:, None]
    flat = input_ids[real][None, :]
    positions = torch.cat([torch.arange(int(k), device=input_ids.device) for k in row_lengths.tolist()])[None, :]
    hidden = model.base_model(input_ids=flat, position_ids=positions, use_cache=False).last_hidden_state[0]
    out = hidden.new_zeros(n, width, hidden.shape[-1])
    out[real] = hidden
    return out
