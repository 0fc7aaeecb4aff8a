"""Micro-batches by token budget with packed sequences give the padded minibatch's loss and
gradients, on random ragged samples, for a transformers model (packed rows) and the hybrid model
(one trimmed row per sample)."""
from __future__ import annotations

import copy

import pytest
import torch
from learner_fixtures import ARCHS, VOCAB, tiny_model

from m1flow.rl.objectives import LossSpec
from svc_learner import packing
from svc_learner.batching import Batch, pack_sequences
from svc_learner.optim import make_optimizer
from svc_learner.update import SequenceLogprobs, TrainConfig, train_on_batch


def ragged_batch(n: int = 7, seed: int = 0) -> Batch:
    """Prompts of 2-6 tokens and responses of 1-9, right-padded; off-policy rollout log-probs."""
    g = torch.Generator().manual_seed(seed)
    draw = lambda lo, hi: int(torch.randint(lo, hi + 1, (), generator=g))  # noqa: E731
    prompts = [torch.randint(0, VOCAB, (draw(2, 6),), generator=g).tolist() for _ in range(n)]
    responses = [torch.randint(0, VOCAB, (draw(1, 9),), generator=g).tolist() for _ in range(n)]
    logps = [(-torch.rand(len(r), generator=g) * 3).tolist() for r in responses]
    ids, mask, logp = pack_sequences(prompts, responses, logps, pad_id=0)
    return Batch(ids, mask, logp, torch.randn(n, generator=g), torch.zeros(n, dtype=torch.long),
                 torch.arange(n) // 2, temperature=torch.tensor([1.0, 0.7] * (n // 2) + [1.0] * (n % 2)))


def test_micro_batches_keep_order_and_the_budget():
    assert packing.micro_batches([3, 4, 2, 9, 1], 8, packed=True) == [[0, 1], [2], [3], [4]]
    assert packing.micro_batches([3, 4, 2, 9, 1], 8, packed=False) == [[0, 1], [2], [3], [4]]
    assert packing.micro_batches([2, 2, 2, 2], 6, packed=True) == [[0, 1, 2], [3]]
    assert packing.micro_batches([2, 2, 2, 2], 6, packed=False) == [[0, 1, 2], [3]]
    assert packing.micro_batches([1, 3, 1, 1], 6, packed=False) == [[0, 1], [2, 3]]  # 3 rows x 3 > 6
    assert packing.micro_batches([5, 5], None, packed=True) == [[0, 1]]
    ids = torch.zeros(2, 6)
    assert packing.lengths(torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1.0]])).tolist() == [4, 6]
    assert ids.shape == (2, 6)


@pytest.mark.parametrize("mode", ["packed", "auto"])
@pytest.mark.parametrize("arch", ARCHS)
def test_micro_batches_give_the_whole_minibatch_loss_and_gradients(arch, mode):
    """Packed rows, and padded rows each trimmed to its micro-batch's longest sample (auto under sdpa)."""
    base = tiny_model(arch)
    batch = ragged_batch()
    assert SequenceLogprobs(base, pack=True).packs == (arch != "hybrid")
    assert SequenceLogprobs.configured(base, TrainConfig(packing=mode)).packs == (arch != "hybrid" and mode == "packed")
    groups = packing.micro_batches(packing.lengths(batch.response_mask[:4]).tolist(), 24, packed=True)
    assert max(len(g) for g in groups) >= 2  # samples share packed rows
    runs = {}
    for budget in (None, 24):
        model = copy.deepcopy(base)
        cfg = TrainConfig(lr=1e-3, minibatches=2, max_tokens_per_micro_batch=budget, packing=mode)
        stats = train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg, LossSpec("cispo"))
        runs[budget] = (model, stats)
    (whole, whole_stats), (micro, micro_stats) = runs[None], runs[24]
    for key in ("loss", "num_tokens", "ratio_mean", "entropy", "grad_norm", "train_infer_corr"):
        assert micro_stats[key] == pytest.approx(whole_stats[key], rel=1e-4, abs=1e-6), key
    for (name, p), q in zip(whole.named_parameters(), micro.parameters()):
        if p.grad is None:
            assert q.grad is None, name
            continue
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-6, msg=name)  # of the last minibatch
        torch.testing.assert_close(q, p, rtol=0, atol=1e-5, msg=name)


def test_auto_packs_only_where_attention_is_varlen():
    """sdpa and eager attend a packed row through a dense mask over all its tokens: auto runs padded rows
    there, packed rows only under flash attention's varlen kernels; the hybrid model never packs."""
    qwen, hybrid = tiny_model("qwen2"), tiny_model("hybrid")
    assert qwen.config._attn_implementation == "sdpa" and not packing.varlen_attention(qwen)
    assert not packing.packs(qwen, "auto") and packing.packs(qwen, "packed") and not packing.packs(qwen, "padded")
    assert not packing.packs(hybrid, "packed")
    flash = torch.nn.Module()
    flash.config = type("Config", (), {"_attn_implementation": "flash_attention_2"})()
    assert packing.varlen_attention(flash) and packing.packs(flash, "auto") and not packing.packs(flash, "padded")
    cfg = TrainConfig(minibatches=1)
    assert cfg.packing == "auto" and not SequenceLogprobs.configured(qwen, cfg).packs
    assert SequenceLogprobs.configured(qwen, cfg.model_copy(update={"packing": "packed"})).packs


def test_packed_rows_never_attend_across_samples():
    """Each sample's hidden states in a packed row equal those of the sample run alone."""
    model = tiny_model("qwen2").eval()
    batch = ragged_batch(n=4, seed=1)
    lengths = packing.lengths(batch.response_mask)
    with torch.no_grad():
        packed = packing.packed_hidden_states(model, batch.input_ids, lengths)
        for row, k in enumerate(lengths.tolist()):
            alone = model.base_model(input_ids=batch.input_ids[row : row + 1, :k]).last_hidden_state[0]
            torch.testing.assert_close(packed[row, :k], alone, rtol=1e-4, atol=1e-5)
            assert (packed[row, k:] == 0).all()
