"""Rollout routing replay (R3) on the hybrid model: record the experts each MoE layer chose, or make
every MoE layer use given experts.

An engine records while it samples, so the learner can later compute the MoE with the experts the
engine used (the router's logits move with training and with numerics; a token routed differently
is scored by a different network than the one that sampled it). Experts are kept as
[positions, layers, k] integers: position p is the p-th token fed through the model (the prompt,
then every sampled token but the last, which is never fed).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from m1flow.model.layers import SparseMoE


def moe_layers(model: nn.Module) -> list[SparseMoE]:
    """The model's MoE blocks in layer order (also inside a DDP or scorer wrapper)."""
    return [m for m in model.modules() if isinstance(m, SparseMoE)]


def expert_dtype(num_experts: int) -> torch.dtype:
    """The narrowest integer that holds an expert index: one byte up to 256 experts."""
    return torch.uint8 if num_experts <= 256 else torch.int16 if num_experts <= 32768 else torch.int32


class Recorder:
    """Collects the experts every MoE layer chose, one model call at a time."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = moe_layers(model)
        num_experts = self.layers[0].gate.out_features if self.layers else 1
        self.dtype = expert_dtype(num_experts)

    def take(self) -> torch.Tensor:
        """[B, T, layers, k] experts of the model calls since the last take (exactly one call)."""
        per_layer = []
        for moe in self.layers:
            if moe.record is None or len(moe.record) != 1:
                raise RuntimeError("Recorder.take expects exactly one model call since the last take")
            per_layer.append(moe.record.pop())
        return torch.stack(per_layer, dim=-2).to(self.dtype)


@contextmanager
def recording(model: nn.Module) -> Iterator[Recorder]:
    """Record every MoE layer's choice while the block runs; `Recorder.take` after each call."""
    recorder = Recorder(model)
    for moe in recorder.layers:
        moe.record = []
    try:
        yield recorder
    finally:
        for moe in recorder.layers:
            moe.record = None


@contextmanager
def replaying(model: nn.Module, experts: torch.Tensor | None) -> Iterator[None]:
    """Every MoE layer uses `experts` [B, T', layers, k] (-1: the router's own choice) for the
    forwards (and backward recomputations) inside the block over inputs [B, T <= T']; None: nothing forced."""
    layers = moe_layers(model)
    if experts is not None and experts.shape[2] != len(layers):
        raise ValueError(f"replayed experts have {experts.shape[2]} layers; the model has {len(layers)} MoE layers")
    for i, moe in enumerate(layers):
        moe.replay = None if experts is None else experts[:, :, i].long()
    try:
        yield
    finally:
        for moe in layers:
            moe.replay = None
