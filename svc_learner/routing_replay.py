"""Rollout routing replay (R3) in the learner: the experts each sample's engine chose, as the [N, T,
layers, k] tensor the model's MoE layers are forced with (m1flow.model.routing), and what could not
be replayed.

A sample whose record does not fit the model (layers, top-k, experts) or itself (positions: prompt
plus tokens less one) is refused with the reason, logged once per sample, and trained with the
learner's own routing (-1 throughout its row); the step counts it (`routing_refused`), as it counts
the samples that came without a record (`routing_missing`: an engine that does not record).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from m1flow.contracts import events
from m1flow.model.routing import moe_layers
from m1flow.routed_experts import RoutingMismatch, RoutingShape, decode

log = logging.getLogger(__name__)


def routing_shape(model: nn.Module) -> RoutingShape:
    """What a record must match to be replayed on `model`; ValueError naming the setting when the
    model has no MoE layers to replay on."""
    layers = moe_layers(model)
    if not layers:
        raise ValueError("train.routing_replay: the model has no MoE layers of the hybrid model to replay "
                         "routing on; set it false")
    return RoutingShape(len(layers), layers[0].top_k, layers[0].gate.out_features)


def _replay_dtype(num_experts: int) -> torch.dtype:
    """The narrowest signed integer holding every expert and -1: one byte for M1's 32 experts."""
    return torch.int8 if num_experts <= 128 else torch.int16 if num_experts <= 32768 else torch.int32


def replay_experts(samples: Sequence[events.ScoredSample], width: int,
                   shape: RoutingShape) -> tuple[Tensor, dict[str, float]]:
    """[N, width, layers, k] experts to force (-1: the model's own routing) for rows laid out like
    svc_learner.batching's, and the counts of samples replayed, refused and without a record."""
    experts = torch.full((len(samples), width, shape.layers, shape.top_k), -1, dtype=_replay_dtype(shape.num_experts))
    counts = {"routing_replayed": 0.0, "routing_refused": 0.0, "routing_missing": 0.0}
    for row, sample in enumerate(samples):
        if not sample.HasField("routed_experts"):
            counts["routing_missing"] += 1
            continue
        positions = len(sample.prompt_token_ids) + len(sample.token_ids) - 1
        try:
            experts[row, :positions] = decode(sample.routed_experts, shape, positions)
        except RoutingMismatch as e:
            log.warning("sample %s: routing not replayed, the learner routes it itself: %s", sample.rollout_id, e)
            counts["routing_refused"] += 1
            continue
        counts["routing_replayed"] += 1
    return experts, counts
