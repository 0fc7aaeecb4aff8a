"""The whole loop over a real broker: prompts -> rollouts -> scored -> CISPO steps -> new policies."""
from __future__ import annotations

import torch

from m1flow.bus import Producer
from m1flow.contracts import events
from m1flow.source import publish
from m1flow.stack import Stack
from m1flow.tasks.arith import problems
from m1flow.topics_io import read_range
from svc_learner.batching import to_batch
from svc_learner.optim import make_optimizer
from svc_learner.update import LearnerConfig, SequenceLogprobs, train_on_batch
from m1flow.model import MiniMaxM1ForCausalLM
from m1flow.bus import codec

from tests.integration.helpers import policy_versions, records, scored_by_group, wait_for

N_PROMPTS, GROUP, BATCH = 16, 4, 4


def test_loop_learns_publishes_versions_and_scores_each_group_once(tmp_path):
    stack = Stack(tmp_path, service_args={"learner": ["--batch-groups", str(BATCH)],
                                          "rollout": ["--max-ahead-groups", str(2 * BATCH)]})
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
    """On real scored groups: one CISPO step raises log-probs of A>0 samples, lowers A<0 ones."""
    from m1flow.warmstart import warm_started_policy

    policy = warm_started_policy(tmp_path / "p0")
    model = MiniMaxM1ForCausalLM.from_pretrained(policy)
    torch.manual_seed(0)
    group = events.ScoredGroup(group_id="g", samples=[])
    rows = [([1, 20, 11, 21], [22, 2], 1.0), ([1, 20, 11, 21], [23, 24, 2], -1.0),
            ([1, 22, 11, 23], [25, 2], 1.0), ([1, 22, 11, 23], [26, 2], -1.0)]
    for i, (prompt, tokens, adv) in enumerate(rows):
        with torch.no_grad():
            ids = torch.tensor([prompt + tokens])
            logp = torch.log_softmax(model(ids)[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
        group.samples.add(rollout_id=str(i), prompt_token_ids=prompt, token_ids=tokens, advantage=adv,
                          logprobs=logp[len(prompt) - 1:].tolist(), status="ok", reward=adv)
    batch = to_batch([group])
    scorer = SequenceLogprobs(model)

    def seq_logp() -> torch.Tensor:
        with torch.no_grad():
            return (scorer(batch.input_ids, batch.response_mask)[0] * batch.response_mask).sum(1)

    before = seq_logp()
    cfg = LearnerConfig(lr=1e-3, minibatches=1)
    train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg, current_version=0)
    delta = seq_logp() - before
    assert (delta[batch.advantages > 0] > 0).all(), delta
    assert (delta[batch.advantages < 0] < 0).all(), delta
