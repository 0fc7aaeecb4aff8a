"""Sampling engines behind one interface (base.Engine), chosen by name (`--engine`): `native`, `hf`, `vllm`.

Two services sample with them: svc_rollout (training rollouts) and svc_eval (held-out sets, with the
exact policy version evaluated), so they live in the library. ENGINES is the one list of them: both
configs validate against it, the CLI and the demo read its names through svc_rollout.client. Each builder imports its engine when called, so naming the engines
costs nothing (no torch, transformers or vLLM) and a machine without vLLM runs the others.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Protocol

from pydantic import AfterValidator

from m1flow.registry import Registry

if TYPE_CHECKING:
    from m1flow.engines.base import Engine
    from m1flow.engines.vllm_engine import VllmSettings


class EngineSettings(Protocol):
    """What the builders read (RolloutConfig and EvalConfig have it; a config imports this module, not the reverse)."""

    engine: str
    batch_groups: int
    group_size: int
    device: str
    torch_threads: int
    vllm: VllmSettings


ENGINES: Registry[Callable[[EngineSettings], "Engine"]] = Registry("rollout engine")


def known_engine(name: str) -> str:
    """`name` when it names an engine; otherwise a ValueError naming the known ones."""
    ENGINES.get(name)
    return name


EngineName = Annotated[str, AfterValidator(known_engine)]  # a config field that must name an engine


@ENGINES.register("native")
def _native(cfg: EngineSettings) -> Engine:
    """The hybrid model's own batched decoding (m1flow.model)."""
    from m1flow.engines.native import NativeEngine

    # record_routing: svc_rollout's (R3); svc_eval has none and never records
    return NativeEngine(cfg.batch_groups, cfg.group_size, cfg.device, getattr(cfg, "record_routing", False))


@ENGINES.register("hf")
def _hf(cfg: EngineSettings) -> Engine:
    """transformers' generate, for any causal LM directory."""
    from m1flow.engines.hf import HFEngine

    return HFEngine(cfg.batch_groups, cfg.group_size, cfg.device)


@ENGINES.register("vllm")
def _vllm(cfg: EngineSettings) -> Engine:
    """vLLM's continuous batching: production."""
    from m1flow.engines.vllm_engine import VllmEngine

    return VllmEngine(cfg.vllm, threads=cfg.torch_threads)


def build(cfg: EngineSettings) -> Engine:
    """The configured engine, this process's torch on cfg.torch_threads (set before any model loads)."""
    import torch

    torch.set_num_threads(cfg.torch_threads)
    return ENGINES.get(cfg.engine)(cfg)


__all__ = ["ENGINES", "EngineSettings", "build"]
