"""Rollout engines behind one interface (base.Engine), chosen by name (`--engine`): `native`, `hf`, `vllm`.

ENGINES is the one list of them: the config validates against it, the CLI and the demo read its
names through svc_rollout.client. Each builder imports its engine when called, so naming the engines
costs nothing (no torch, transformers or vLLM) and a machine without vLLM runs the others.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from m1flow.rl.registry import Registry

if TYPE_CHECKING:
    from svc_rollout.config import RolloutConfig
    from svc_rollout.engines.base import Engine

ENGINES: Registry[Callable[["RolloutConfig"], "Engine"]] = Registry("rollout engine")


@ENGINES.register("native")
def _native(cfg: RolloutConfig) -> Engine:
    """The hybrid model's own batched decoding (m1flow.model)."""
    from svc_rollout.engines.native import NativeEngine

    return NativeEngine(cfg.batch_groups, cfg.group_size, cfg.device)


@ENGINES.register("hf")
def _hf(cfg: RolloutConfig) -> Engine:
    """transformers' generate, for any causal LM directory."""
    from svc_rollout.engines.hf import HFEngine

    return HFEngine(cfg.batch_groups, cfg.group_size, cfg.device)


@ENGINES.register("vllm")
def _vllm(cfg: RolloutConfig) -> Engine:
    """vLLM's continuous batching: production."""
    from svc_rollout.engines.vllm_engine import VllmEngine

    return VllmEngine(cfg.vllm, threads=cfg.torch_threads)


def build(cfg: RolloutConfig) -> Engine:
    """The configured engine."""
    return ENGINES.get(cfg.engine)(cfg)


__all__ = ["ENGINES", "build"]
