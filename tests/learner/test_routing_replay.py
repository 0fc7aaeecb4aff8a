"""Routing replay (R3) in the learner: with the engine's recorded experts, the learner's recomputed
log-probs equal the engine's even when the router's logits move so that it would route every token
elsewhere; without replay they do not. A record that does not fit is refused with its reason and
the sample routed by the learner, counted, never a crash."""
from __future__ import annotations

import copy
import logging

import pytest
import torch

from m1flow import checkpoint
from m1flow.contracts import events
from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM, sample_batch
from m1flow.model.routing import moe_layers, recording, replaying
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.objectives import LossSpec
from m1flow.routed_experts import encode
from m1flow.status import Status
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, build_model
from svc_learner.batching import Batch, pack_sequences
from svc_learner.config import LearnerServiceConfig
from svc_learner.routing_replay import replay_experts, routing_shape
from svc_learner.trainer import Trainer
from svc_learner.update import SequenceLogprobs, TrainConfig, run_updates

V, EXPERTS = 64, 8
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = MiniMaxM1Config.tiny(vocab_size=V, num_local_experts=EXPERTS, num_experts_per_tok=2)
    m = MiniMaxM1ForCausalLM(config).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(10)  # a peaked distribution: a changed network shows in the log-probs
    return m


@pytest.fixture(scope="module")
def rollouts(model) -> list[events.ScoredSample]:
    """Samples of the engine's sampler (top-p 1: the learner's distribution), with their routing."""
    gens = [torch.Generator().manual_seed(i) for i in range(len(PROMPTS))]
    groups = sample_batch(model, PROMPTS, n=2, max_new_tokens=12, top_p=1.0, generators=gens, record_routing=True)
    return [events.ScoredSample(rollout_id=f"r{i}-{j}", prompt_token_ids=p, token_ids=c.tokens, logprobs=c.logprobs,
                                routed_experts=encode(c.experts, EXPERTS))
            for i, (p, g) in enumerate(zip(PROMPTS, groups)) for j, c in enumerate(g)]


def recomputed(model, samples, replay: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """(learner log-probs, engine log-probs) on the response tokens, and the replay counts."""
    ids, mask, engine = pack_sequences([list(s.prompt_token_ids) for s in samples], [list(s.token_ids) for s in samples],
                                       [list(s.logprobs) for s in samples])
    experts, counts = replay_experts(samples, ids.shape[1], routing_shape(model))
    with torch.no_grad(), replaying(model, experts if replay else None):
        logp = SequenceLogprobs(model)(ids, mask).logp
    scored = mask.bool().clone()
    scored[:, 0] = False
    return logp[scored], engine[scored], counts


def lift_the_last_expert(moe, monkeypatch) -> None:
    """Perturb the router's logits: each token's least likely expert now outranks all others, so the
    router would route every token elsewhere; the logits of the other experts are left as they were."""
    own = moe.router_logits

    def perturbed(x: torch.Tensor) -> torch.Tensor:
        logits = own(x)
        return logits.scatter_add(-1, logits.argmin(-1, keepdim=True), torch.full_like(logits[:, :1], 50.0))

    monkeypatch.setattr(moe, "router_logits", perturbed)


def test_replayed_logprobs_equal_the_engines_under_a_perturbed_router(model, rollouts, monkeypatch):
    learner, engine, counts = recomputed(model, rollouts, replay=False)
    torch.testing.assert_close(learner, engine, rtol=0, atol=2e-4)  # same router: same routing either way
    assert counts == {"routing_replayed": len(rollouts), "routing_refused": 0, "routing_missing": 0}
    for moe in moe_layers(model):
        lift_the_last_expert(moe, monkeypatch)
    learner, engine, _ = recomputed(model, rollouts, replay=True)
    torch.testing.assert_close(learner, engine, rtol=0, atol=2e-4)
    learner, engine, _ = recomputed(model, rollouts, replay=False)
    assert (learner - engine).abs().max() > 100 * 2e-4  # the learner's own routing: another network


def test_the_gate_is_still_trained_under_replay(model, rollouts):
    ids, mask, _ = pack_sequences([list(s.prompt_token_ids) for s in rollouts], [list(s.token_ids) for s in rollouts],
                                  [list(s.logprobs) for s in rollouts])
    experts, _ = replay_experts(rollouts, ids.shape[1], routing_shape(model))
    model.zero_grad(set_to_none=True)
    with replaying(model, experts):
        SequenceLogprobs(model)(ids, mask).logp.sum().backward()
    assert all(moe.gate.weight.grad is not None and moe.gate.weight.grad.abs().sum() > 0 for moe in moe_layers(model))
    model.zero_grad(set_to_none=True)


def mismatched(sample: events.ScoredSample, how: str) -> events.ScoredSample:
    bad = events.ScoredSample()
    bad.CopyFrom(sample)
    r = bad.routed_experts
    if how == "layers":
        r.layers += 1
    elif how == "top_k":
        r.top_k = 1
    elif how == "positions":
        bad.token_ids.append(1)
        bad.logprobs.append(-1.0)
    elif how == "bytes":
        r.experts = r.experts[:-1]
    elif how == "expert":
        r.experts = bytes([EXPERTS]) + r.experts[1:]
    else:
        bad.ClearField("routed_experts")
    return bad


@pytest.mark.parametrize("how,reason", [("layers", "routed_experts.layers is 5; the model has 4"),
                                        ("top_k", "routed_experts.top_k is 1; the model has 2"),
                                        ("positions", "routed_experts.positions is"),
                                        ("bytes", "routed_experts.experts holds"),
                                        ("expert", "names expert 8; the model has 8")])
def test_a_record_that_does_not_fit_is_refused_and_the_learner_routes_it(model, rollouts, how, reason, caplog):
    samples = [mismatched(rollouts[0], how), rollouts[1]]
    with caplog.at_level(logging.WARNING, logger="svc_learner.routing_replay"):
        experts, counts = replay_experts(samples, 40, routing_shape(model))
    assert counts == {"routing_replayed": 1, "routing_refused": 1, "routing_missing": 0}
    assert reason in caplog.text and rollouts[0].rollout_id in caplog.text
    assert bool((experts[0] == -1).all()) and bool((experts[1, 0] >= 0).all())


def test_a_sample_without_a_record_is_counted_missing(model, rollouts):
    _, counts = replay_experts([mismatched(rollouts[0], "none")], 40, routing_shape(model))
    assert counts == {"routing_replayed": 0, "routing_refused": 0, "routing_missing": 1}


@pytest.mark.parametrize("replay", [True, False])
def test_the_update_loop_scores_with_the_replayed_experts(model, rollouts, replay, monkeypatch):
    """run_updates (what the trainer runs) under a perturbed router: the first minibatch's log-probs
    against the engine's, |log ratio| per token, before its optimizer step moves anything."""
    learner = copy.deepcopy(model)
    for moe in moe_layers(learner):
        lift_the_last_expert(moe, monkeypatch)
    ids, mask, engine = pack_sequences([list(s.prompt_token_ids) for s in rollouts], [list(s.token_ids) for s in rollouts],
                                       [list(s.logprobs) for s in rollouts])
    experts, _ = replay_experts(rollouts, ids.shape[1], routing_shape(learner))
    batch = Batch(ids, mask, engine, torch.ones(len(rollouts)), torch.zeros(len(rollouts), dtype=torch.long),
                  torch.arange(len(rollouts)), routed_experts=experts if replay else None)
    cfg = TrainConfig(lr=1e-6, minibatches=1, max_tokens_per_micro_batch=16)  # micro-batches of a row or two
    stats = run_updates(SequenceLogprobs.configured(learner, cfg), torch.optim.SGD(learner.parameters(), lr=1e-6),
                        batch, cfg, LossSpec())
    if replay:
        assert stats["abs_log_ratio"] < 2e-4
    else:
        assert stats["abs_log_ratio"] > 2e-3  # measured: 5e-7 with replay, 0.019 without


def test_the_trainer_replays_what_fits_and_counts_the_rest(tmp_path):
    """train.routing_replay on a hybrid policy directory: one sample's record fits, one does not (its
    positions), two have none; the step trains all four and says so."""
    tok = build_tokenizer()
    model = build_model(tok, WarmStartConfig(arch="minimax_m1", model_overrides={"num_hidden_layers": 2}))
    policy = checkpoint.save_policy(tmp_path / "p0", model, tok)
    group = events.ScoredGroup(group_id="g", group_size=4)
    for i in range(4):
        prompt, tokens = [1, 5, 6], [7 + i, 8, 9, 10]
        sample = group.samples.add(index=i, rollout_id=f"g/{i}", prompt_token_ids=prompt, token_ids=tokens,
                                   logprobs=[-2.0] * 4, reward=float(i % 2), status=Status.OK, temperature=1.0,
                                   top_p=1.0)
        if i < 2:
            with torch.no_grad(), recording(model) as recorder:
                model(torch.tensor([prompt + tokens]))
                experts = recorder.take()[0, : -1 if i == 0 else None]  # sample 1: one position too many
            sample.routed_experts.CopyFrom(encode(experts, model.config.num_local_experts))
    cfg = LearnerServiceConfig(run_dir=tmp_path / "run", init_checkpoint=policy, batch_groups=1,
                               train={"lr": 1e-3, "minibatches": 1, "routing_replay": True})
    stats = Trainer(cfg).step([AlgorithmConfig().select(group, current_version=0)], {"scored/0": 1})
    assert stats["updates"] == 1
    assert (stats["routing_replayed"], stats["routing_refused"], stats["routing_missing"]) == (1, 1, 2)


def test_a_policy_without_moe_layers_is_refused_at_start(tmp_path):
    tok = build_tokenizer()
    policy = checkpoint.save_policy(tmp_path / "p0", build_model(tok, WarmStartConfig(arch="qwen2")), tok)
    cfg = LearnerServiceConfig(run_dir=tmp_path / "run", init_checkpoint=policy, train={"routing_replay": True})
    with pytest.raises(ValueError, match="train.routing_replay"):
        Trainer(cfg)
