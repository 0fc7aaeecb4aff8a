"""Rollout engines behind one interface (base.Engine): `native`, `hf`, `vllm`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from svc_rollout.engines.base import Engine, GroupRequest, GroupResult, Sample

if TYPE_CHECKING:  # svc_rollout.config imports the engines' settings: no circle at run time
    from svc_rollout.config import RolloutConfig


def build(cfg: RolloutConfig) -> Engine:
    """The configured engine; vLLM and transformers are imported only by the engine that uses them."""
    if cfg.engine == "vllm":
        from svc_rollout.engines.vllm_engine import VllmEngine

        return VllmEngine(cfg.vllm, threads=cfg.torch_threads)
    if cfg.engine == "hf":
        from svc_rollout.engines.hf import HFEngine

        return HFEngine(cfg.batch_groups, cfg.group_size, cfg.device)
    from svc_rollout.engines.native import NativeEngine

    return NativeEngine(cfg.batch_groups, cfg.group_size, cfg.device)


__all__ = ["Engine", "GroupRequest", "GroupResult", "Sample", "build"]
