"""Routing recording (R3) in the hybrid model's sampler: every token fed through the model carries
the experts each MoE layer chose, the same ones a full forward over prompt + completion routes to;
and replaying them forces those experts whatever the router now says."""
import pytest
import torch

from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM, sample_batch
from m1flow.model.routing import moe_layers, recording, replaying

V = 64
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9], [5]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = MiniMaxM1Config.tiny(vocab_size=V, num_local_experts=8, num_experts_per_tok=2)
    return MiniMaxM1ForCausalLM(config).eval()


def routed(model, ids: list[int]) -> torch.Tensor:
    """[len(ids), layers, k] experts of one full forward over ids."""
    with torch.no_grad(), recording(model) as recorder:
        model(torch.tensor([ids]))
        return recorder.take()[0]


def test_each_completion_carries_the_experts_a_full_forward_routes_to(model):
    gens = [torch.Generator().manual_seed(i) for i in range(len(PROMPTS))]
    batches = sample_batch(model, PROMPTS, n=3, max_new_tokens=[12, 9, 15], generators=gens, record_routing=True)
    layers, k = model.config.num_hidden_layers, model.config.num_experts_per_tok
    for prompt, group in zip(PROMPTS, batches):
        for c in group:
            assert c.experts.dtype == torch.uint8
            assert c.experts.shape == (len(prompt) + len(c.tokens) - 1, layers, k)
            full = routed(model, prompt + c.tokens)[:-1]  # the last token is never fed while sampling
            assert torch.equal(c.experts.sort(-1).values, full.sort(-1).values)


def test_recording_changes_no_sample(model):
    plain = sample_batch(model, PROMPTS, n=2, max_new_tokens=10, generators=[torch.Generator().manual_seed(1)] * 3)
    recorded = sample_batch(model, PROMPTS, n=2, max_new_tokens=10, generators=[torch.Generator().manual_seed(1)] * 3,
                            record_routing=True)
    assert [[c.tokens for c in g] for g in plain] == [[c.tokens for c in g] for g in recorded]
    assert all(c.experts is None for g in plain for c in g)
    assert all(moe.record is None for moe in moe_layers(model))  # recording ends with the call


def test_replay_forces_the_recorded_experts_under_another_router(model):
    ids = PROMPTS[1]
    experts = routed(model, ids)
    with torch.no_grad():
        before = model(torch.tensor([ids]))
        saved = [moe.gate.weight.clone() for moe in moe_layers(model)]
        try:
            for moe in moe_layers(model):
                moe.gate.weight.copy_(torch.randn_like(moe.gate.weight))  # another router altogether
            assert not torch.equal(routed(model, ids).sort(-1).values, experts.sort(-1).values)
            with replaying(model, experts[None]):
                assert torch.equal(routed(model, ids), experts.long())  # the record still on: it sees the replay
                after = model(torch.tensor([ids]))
        finally:
            for moe, weight in zip(moe_layers(model), saved):
                moe.gate.weight.copy_(weight)
    assert not torch.allclose(before, after, atol=1e-3)  # the router's weights still weigh the experts
    assert all(moe.replay is None for moe in moe_layers(model))
