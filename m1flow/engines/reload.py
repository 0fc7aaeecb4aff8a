"""A new policy version copied into the model already in memory, when only its weights changed.

A learner announces a version per step, and between versions the architecture, the tokenizer and the
chat template stay the same: only the tensors change. Rebuilding the model and the tokenizer from the
directory every time (transformers' `from_pretrained`) costs each rollout and eval replica several times
what copying the new tensors into the live modules does (`bench/policy_reload.py`). A version whose
config or tokenizer files differ from the loaded one's is loaded whole, as is any whose tensors do not
match the live model's names and shapes: nothing is copied until every tensor has been checked.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from m1flow import checkpoint

LAYOUT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def layout_key(directory: str | Path) -> str:
    """What must be equal for a version to be copied into the last one's model: the files that define
    the architecture, the tokenizer and the chat template (the weights aside)."""
    digest = hashlib.sha256()
    for name in LAYOUT_FILES:
        path = Path(directory) / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"(absent)") + b"\0")
    return digest.hexdigest()


def copy_weights(model: nn.Module, directory: str | Path) -> None:
    """Copy every tensor of the directory's weight files into `model`, in place; PolicyLoadError, with
    the model untouched, when a name is not one of the model's, a shape differs, or a tensor of the model
    is neither in the files nor tied to one that is (a tied LM head is saved once)."""
    state = model.state_dict()
    incoming: dict[str, torch.Tensor] = {}
    for path in checkpoint.weight_files(directory):
        if path.suffix == ".safetensors":
            incoming.update(load_file(str(path)))
    for name, tensor in incoming.items():
        if name not in state:
            raise checkpoint.PolicyLoadError(f"{directory}: {name} is not a tensor of the loaded model")
        if state[name].shape != tensor.shape:
            raise checkpoint.PolicyLoadError(
                f"{directory}: {name} has shape {tuple(tensor.shape)}, the loaded model's {tuple(state[name].shape)}")
    covered = {state[name].data_ptr() for name in incoming}
    missing = [name for name, tensor in state.items() if name not in incoming and tensor.data_ptr() not in covered]
    if missing:
        raise checkpoint.PolicyLoadError(f"{directory}: no weights for {', '.join(missing[:5])}")
    with torch.no_grad():
        for name, tensor in incoming.items():
            state[name].copy_(tensor)
