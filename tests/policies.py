"""Warm-started small policies shared by the tests (cached under ~/.cache/m1flow after the first run)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from m1flow import checkpoint, lm
from ops.warmstart import WarmStartConfig, warm_started_policy


@pytest.fixture(scope="session")
def qwen2_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Qwen2 (transformers' architecture, built from a config) warm-started on the demo task."""
    return warm_started_policy(tmp_path_factory.mktemp("policies") / "qwen2", WarmStartConfig(arch="qwen2"))


@pytest.fixture(scope="session")
def hybrid_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's hybrid lightning-attention model, warm-started on the demo task."""
    return warm_started_policy(tmp_path_factory.mktemp("policies") / "hybrid", WarmStartConfig())


def looping_copy(policy: Path, dest: Path, token: str = "7") -> Path:
    """The policy rewired into a loop: every token embeds alike, so every position has the same
    hidden state h, and the head row of `token` is set to 50 h / |h|^2, so that token is drawn with
    probability about 1 at every step, forever: what the report's repetition truncation is for."""
    model, tok = checkpoint.load_model(policy), checkpoint.load_tokenizer(policy)
    embed = model.get_input_embeddings()
    with torch.no_grad():
        embed.weight.copy_(embed.weight[:1].expand_as(embed.weight))
        h = lm.hidden_states(model, torch.tensor([[1, 2, 3]]))[0, -1].float()
        lm.head_weight(model)[tok.convert_tokens_to_ids(token)] = 50 * h / h.dot(h)
    return checkpoint.save_policy(dest, model, tok)
