"""Where the learner's model lives and in what precision.

On CUDA the weights train in bf16 except the LM head, which is kept in fp32: the report traced its
train/inference probability mismatch to the head (svc_learner.precision), and the head matmul runs
in fp32 in any case (cast_head); keeping its weights fp32 too keeps its updates exact. A head tied
to the input embedding stays in the model's dtype (casting it would feed fp32 activations into
bf16 layers); its matmul is still fp32. On the CPU everything is fp32 by default.
"""
from __future__ import annotations

import logging
from typing import Literal

import torch
from torch import nn

from m1flow import checkpoint, lm
from m1flow.device import resolve

log = logging.getLogger(__name__)

ModelDtype = Literal["auto", "fp32", "bf16"]
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def model_dtype(dtype: ModelDtype, device: torch.device) -> torch.dtype:
    """auto: bf16 on CUDA, fp32 elsewhere."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[dtype]


def load_trainable(directory, device: str, dtype: ModelDtype) -> nn.Module:
    """The policy in `directory` on `device` (auto: CUDA where present), trainable, in `dtype` with an
    fp32 LM head."""
    where = resolve(device)
    model = checkpoint.load_model(directory, device=where, dtype=model_dtype(dtype, where), trainable=True)
    keep_head_fp32(model)
    return model


def keep_head_fp32(model: nn.Module) -> None:
    weight = lm.head_weight(model)
    if weight.dtype == torch.float32:
        return
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None and embeddings.weight is weight:
        log.info("LM head tied to the input embedding: kept in %s (its matmul runs in fp32)", weight.dtype)
        return
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else model.lm_head
    head.to(torch.float32)
