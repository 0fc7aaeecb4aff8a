"""The whole loop over a real broker: prompts -> rollouts -> scored -> CISPO steps -> new policies."""
from __future__ import annotations

import torch

from m1flow.bus import Producer
from m1flow.contracts import events
from m1flow.source import publish
from m1flow.stack import Stack
from m1flow.tasks.arith import problems
from m1flow.rl.config import AlgorithmConfig
from m1flow.status import Status
from m1flow.topics_io import read_range
from svc_learner.batching import to_batch
from svc_learner.optim import make_optimizer
from svc_learner.update import LearnerConfig, SequenceLogprobs, train_on_batch
from m1flow.model import MiniMaxM1ForCausalLM

from tests.integration.helpers import policy_versions, records, scored_by_group, wait_for

N_PROMPTS, GROUP, BATCH = 16, 4, 4
ALL_GROUPS = '{"dynamic_sampling": false}'


def test_loop_learns_publishes_versions_and_scores_each_group_once(tmp_path):
    # every group takes a place in a batch (no dynamic sampling), so 16 groups make 4 steps whatever
    # the rewards; refilling batches with trainable groups is tested in test_learner_selection.py.
    # The rollout service samples one batch per version, then waits for the next: later rollouts carry
    # reloaded versions however fast or slow each service runs (with 2 batches ahead, all 16 groups
    # could be sampled on v0 and v1 before v2 arrived, which happened under load).
    stack = Stack(tmp_path, service_args={"learner": ["--batch-groups", str(BATCH), "--algorithm", ALL_GROUPS],
                                          "rollout": ["--max-ahead-groups", str(BATCH)]})
    try:
        stack.start(services=("learner", "reward", "rollout", "monitor"))
        ids = publish(Producer(stack.bootstrap, "test"), problems(seed=3, n=N_PROMPTS, max_operand=20), GROUP)
        wait_for(lambda: len(scored_by_group(stack.bootstrap)) >= N_PROMPTS, 240, "all groups scored")
        wait_for(lambda: max(policy_versions(stack.bootstrap)) >= 3, 120, "three policy versions")

        scored = scored_by_group(stack.bootstrap)
        assert sorted(g.split("/")[0] for g in scored) == sorted(ids)  # each prompt's group, once
        assert all(len(v) == 1 for v in scored.values())
        assert all(len(v[0]["samples"]) == GROUP for v in scored.values())

        rollouts = records(stack.bootstrap, "rollouts")
        assert len(rollouts) == N_PROMPTS * GROUP
        versions_by_partition: dict[int, list[int]] = {}
        for rec in rollouts:
            versions_by_partition.setdefault(rec["partition"], []).append(int(rec["value"].get("policy_version", 0)))
        assert max(max(v) for v in versions_by_partition.values()) >= 2  # later rollouts carry reloaded versions
        for seq in versions_by_partition.values():  # one rollout replica: versions never go back
            assert seq == sorted(seq)
    finally:
        stack.stop()


def test_learner_step_moves_logprobs_by_advantage_sign(tmp_path):
    """One CISPO step on the policy's own samples, selected (m1flow.rl) and built through the
    learner's batching from a ScoredGroup: log-probs of A>0 samples rise, those of A<0 samples fall."""
    from m1flow.policy import generator, load_policy, uri_for
    from m1flow.model import sample
    from m1flow.warmstart import warm_started_policy

    policy = warm_started_policy(tmp_path / "p0")
    model = MiniMaxM1ForCausalLM.from_pretrained(policy)
    _, tok = load_policy(uri_for(policy))
    prompt = [tok.bos_id, *tok.encode("12+7=")]
    completions = sample(model, prompt, n=8, max_new_tokens=8, eos_id=tok.eos_id, generator=generator(0))
    group = events.ScoredGroup(group_id="g", group_size=len(completions))
    for i, comp in enumerate(completions):
        group.samples.add(rollout_id=str(i), index=i, prompt_token_ids=prompt, token_ids=comp.tokens,
                          logprobs=comp.logprobs, reward=1.0 if i % 2 == 0 else 0.0, status=Status.OK)
    selected = AlgorithmConfig().select(group, current_version=0)
    assert [round(a, 3) for a in selected.advantages] == [1.0, -1.0] * 4  # GRPO on rewards 1, 0, 1, 0, ...
    batch = to_batch([selected])
    scorer = SequenceLogprobs(model)

    def seq_logp() -> torch.Tensor:
        with torch.no_grad():
            return (scorer(batch.input_ids, batch.response_mask)[0] * batch.response_mask).sum(1)

    before = seq_logp()
    cfg = LearnerConfig(lr=1e-4, minibatches=1)
    train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg)
    delta = seq_logp() - before
    # identical completions can sit on both sides; judge each distinct completion by its net advantage
    net: dict[tuple, float] = {}
    for comp, adv in zip(completions, batch.advantages.tolist()):
        net[tuple(comp.tokens)] = net.get(tuple(comp.tokens), 0.0) + adv
    for comp, d in zip(completions, delta.tolist()):
        if net[tuple(comp.tokens)] > 0:
            assert d > 0, (comp.tokens, d)
        elif net[tuple(comp.tokens)] < 0:
            assert d < 0, (comp.tokens, d)
    assert any(v != 0 for v in net.values())
