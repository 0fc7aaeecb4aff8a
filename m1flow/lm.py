"""What the learner and the warm start need from any causal LM: final hidden states and the LM head.

The project's hybrid model exposes them itself (`hidden_states`, `lm_head`); a transformers model
(Qwen2, Llama, ...) through its base model and output embeddings. The head is applied by the
caller, in fp32 and in chunks (the report's fp32 LM head), never by the model. Models whose
logits are more than `hidden @ head.T` (soft-capping, logit scaling) are not supported here.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def hidden_states(model: nn.Module, input_ids: Tensor) -> Tensor:
    """[B, T, hidden] states the head turns into the logits of the next token."""
    if hasattr(model, "hidden_states"):
        return model.hidden_states(input_ids)
    return model.base_model(input_ids=input_ids, use_cache=False).last_hidden_state


def head_weight(model: nn.Module) -> Tensor:
    """[V, hidden] weight of the LM head."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else model.lm_head
    if getattr(head, "bias", None) is not None:
        raise ValueError("an LM head with a bias is not supported")
    return head.weight


def logits(model: nn.Module, input_ids: Tensor) -> Tensor:
    """fp32 logits [B, T, V] (whole-vocabulary; for the small models of warm starts and tests)."""
    return F.linear(hidden_states(model, input_ids).float(), head_weight(model).float())


def check_supported(model: nn.Module) -> None:
    """Refuse models whose logits the head alone does not give (the learner would train the wrong ones)."""
    config = getattr(model, "config", None)
    for key in ("final_logit_softcapping", "logit_scale", "output_multiplier_scale"):
        value = getattr(config, key, None)
        if value not in (None, 1.0):
            raise ValueError(f"model config has {key}={value}: its logits are not hidden @ head.T")
    if torch.is_tensor(getattr(model, "logits_scaling", None)):
        raise ValueError("models with logits scaling are not supported")
