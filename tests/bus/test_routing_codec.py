"""Replaying the `rollouts` topic reproduces the engine's routing (R3): a Rollout's routing record
comes back from its framed bytes unchanged, and svc_reward carries it onto the ScoredSample the
learner replays, through `scored`'s framing too. Broker-free: the bytes are what a topic holds."""
from __future__ import annotations

import torch

from m1flow.bus import Record, codec
from m1flow.contracts import events
from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM, sample_batch
from m1flow.routed_experts import RoutingShape, decode, encode
from svc_reward.groups import GroupBuffer, score_group
from svc_reward.scorers import ScorerRegistry

EXPERTS = 300  # above 256: the two-byte form; the one-byte form is what test_routing_replay replays


def recorded_rollouts() -> tuple[list[events.Rollout], list[torch.Tensor], MiniMaxM1Config]:
    torch.manual_seed(0)
    config = MiniMaxM1Config.tiny(vocab_size=64, num_hidden_layers=2, num_local_experts=EXPERTS,
                                  num_experts_per_tok=3, intermediate_size=16)
    model = MiniMaxM1ForCausalLM(config).eval()
    prompt = [3, 1, 4, 1, 5]
    completions = sample_batch(model, [prompt], n=2, max_new_tokens=6, generators=[torch.Generator().manual_seed(0)],
                               record_routing=True)[0]
    rollouts = [events.Rollout(
        header=codec.header("rollout", run_id="r", group_id="g"), rollout_id=f"g/{i}", group_id="g", index=i,
        group_size=2, task_type="arith", prompt_text="3+4=", prompt_token_ids=prompt, token_ids=c.tokens,
        logprobs=c.logprobs, response_text="7", verifier=events.VerifierSpec(kind="arith", gold="7"),
        routed_experts=encode(c.experts, EXPERTS)) for i, c in enumerate(completions)]
    return rollouts, [c.experts for c in completions], config


def test_a_rollout_and_its_scored_sample_carry_the_routing_unchanged():
    rollouts, experts, config = recorded_rollouts()
    shape = RoutingShape(config.num_hidden_layers, config.num_experts_per_tok, EXPERTS)
    buffer, pending = GroupBuffer(), None
    for offset, rollout in enumerate(rollouts):
        value = codec.encode(rollout)  # what the topic holds
        again = codec.decode(value, events.Rollout)
        assert again.routed_experts == rollout.routed_experts
        positions = len(again.prompt_token_ids) + len(again.token_ids) - 1
        assert torch.equal(decode(again.routed_experts, shape, positions), experts[offset].long())
        pending, _ = buffer.add(again, Record("rollouts", 0, offset, b"g", value, 0))
    scored = codec.decode(codec.encode(score_group(pending, ScorerRegistry())), events.ScoredGroup)
    for sample in scored.samples:
        positions = len(sample.prompt_token_ids) + len(sample.token_ids) - 1
        assert torch.equal(decode(sample.routed_experts, shape, positions), experts[sample.index].long())


def test_a_group_too_large_with_its_routing_goes_to_scored_without_it(caplog):
    rollouts, _, _ = recorded_rollouts()
    buffer, pending = GroupBuffer(), None
    big = events.RoutedExperts(layers=80, top_k=2, num_experts=32, positions=60_000, experts=bytes(60_000 * 160))
    for offset, rollout in enumerate(rollouts):
        rollout.routed_experts.CopyFrom(big)  # 9.6 MB each: the pair over the 16 MiB limit
        pending, _ = buffer.add(rollout, Record("rollouts", 0, offset, b"g", b"", 0))
    scored = score_group(pending, ScorerRegistry())
    assert len(scored.samples) == 2 and not any(s.HasField("routed_experts") for s in scored.samples)
    assert "routing records left out" in caplog.text and "over the bus's limit" in caplog.text
