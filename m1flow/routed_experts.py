"""The wire form of a rollout's routing record (R3, `RoutedExperts` in events.proto): experts as
packed bytes with their shape, and the check a learner makes before replaying one.

One byte per (position, layer, slot) up to 256 experts (MiniMax-M1: 32), two little-endian bytes
above: the index itself, no varints, so a 40K-token record decodes with one frombuffer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from m1flow.contracts import events


class RoutingMismatch(ValueError):
    """A routing record that does not fit the model or the sample it came with; the reason names the field."""


@dataclass(frozen=True)
class RoutingShape:
    """What a record must match to be replayed on a model."""

    layers: int
    top_k: int
    num_experts: int


def _wire_dtype(num_experts: int) -> np.dtype:
    return np.dtype(np.uint8) if num_experts <= 256 else np.dtype("<u2")


def encode(experts: torch.Tensor, num_experts: int) -> events.RoutedExperts:
    """experts [positions, layers, k] (integers below num_experts) as a RoutedExperts message."""
    if experts.dim() != 3:
        raise ValueError(f"experts must be [positions, layers, k]; got shape {tuple(experts.shape)}")
    if num_experts > 65536:
        raise ValueError(f"num_experts {num_experts}: at most 65536 fit the two-byte encoding")
    positions, layers, top_k = experts.shape
    packed = experts.to(torch.int32).numpy().astype(_wire_dtype(num_experts)).tobytes()
    return events.RoutedExperts(layers=layers, top_k=top_k, num_experts=num_experts, positions=positions,
                                experts=packed)


def decode(record: events.RoutedExperts, shape: RoutingShape, positions: int) -> torch.Tensor:
    """[positions, layers, k] long experts of `record`, or RoutingMismatch naming what does not match
    the model (`shape`) or the sample (`positions`: its prompt and tokens less one)."""
    for field, want in (("layers", shape.layers), ("top_k", shape.top_k), ("num_experts", shape.num_experts),
                        ("positions", positions)):
        got = getattr(record, field)
        if got != want:
            owner = "sample" if field == "positions" else "model"
            raise RoutingMismatch(f"routed_experts.{field} is {got}; the {owner} has {want}")
    dtype = _wire_dtype(shape.num_experts)
    expected = positions * shape.layers * shape.top_k * dtype.itemsize
    if len(record.experts) != expected:
        raise RoutingMismatch(f"routed_experts.experts holds {len(record.experts)} bytes; "
                              f"{positions} x {shape.layers} x {shape.top_k} need {expected}")
    values = np.frombuffer(record.experts, dtype=dtype).astype(np.int64).reshape(positions, shape.layers, shape.top_k)
    if values.size and int(values.max()) >= shape.num_experts:
        raise RoutingMismatch(f"routed_experts.experts names expert {int(values.max())}; the model has "
                              f"{shape.num_experts}")
    if shape.top_k > 1 and bool((np.diff(np.sort(values, axis=-1), axis=-1) == 0).any()):
        raise RoutingMismatch("routed_experts.experts names one expert twice in a token's top-k")
    return torch.from_numpy(values)
