"""The whole loop over a real broker: prompts -> rollouts -> scored -> CISPO steps -> new policies."""
from __future__ import annotations

import json
import time

import pytest
import torch

from m1flow.bus import Producer
from m1flow.contracts import events
from ops.feed import publish
from ops.stack import Stack
from m1flow.tasks.arith import problems
from m1flow.rl.config import AlgorithmConfig
from m1flow.status import Status
from ops.topics_io import read_range
from svc_learner.batching import to_batch
from svc_learner.optim import make_optimizer
from svc_learner.update import SequenceLogprobs, TrainConfig, train_on_batch

from tests.integration.helpers import policy_versions, records, scored_by_group, wait_for

N_PROMPTS, GROUP, BATCH = 16, 4, 4
ALL_GROUPS = '{"dynamic_sampling": false}'


def test_loop_learns_publishes_versions_and_scores_each_group_once(tmp_path):
    # every group takes a place in a batch (no dynamic sampling), so 16 groups make 4 steps whatever
    # the rewards; refilling batches with trainable groups is tested in test_learner_selection.py.
    # The rollout service runs at most one learner batch ahead (backpressure by versions), so later
    # rollouts carry reloaded versions however fast or slow each service runs.
    stack = Stack(tmp_path, service_args={"learner": ["--batch-groups", str(BATCH), "--algorithm", ALL_GROUPS],
                                          "rollout": ["--max-ahead-versions", "0"]})
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
    learner's batching from a ScoredGroup: the advantage-weighted log-probs rise."""
    from m1flow.chat import prompt_ids
    from m1flow.checkpoint import load_model, load_tokenizer
    from m1flow.model import sample
    from m1flow.sampling import generator
    from ops.warmstart import warm_started_policy

    policy = warm_started_policy(tmp_path / "p0")
    model, tok = load_model(policy, trainable=True), load_tokenizer(policy)
    prompt = prompt_ids(tok, "12+7=")
    completions = sample(model, prompt, n=8, max_new_tokens=8, eos_id=tok.eos_token_id, generator=generator(0))
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
    cfg = TrainConfig(lr=1e-4, minibatches=1)
    train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg)
    delta = seq_logp() - before
    # completions share prefixes (the chat template's reasoning opener, the first digits), so one
    # sample's log-prob may move against its own sign; what a policy-gradient step guarantees is
    # that the advantage-weighted log-probs rise: A>0 samples gain on A<0 samples
    adv = batch.advantages
    assert float((adv * delta).sum()) > 0, delta
    assert float(delta[adv > 0].mean()) > float(delta[adv < 0].mean()), delta


def sampled_accuracy(rollout: str, asked: list, scorer, samples: int = 8) -> tuple[float, set[int]]:  # noqa: ANN001
    """Accuracy of `samples` completions per problem, sampled by the rollout service (temperature 1, its
    engine batching the concurrent requests), and the policy versions that sampled them."""
    from concurrent.futures import ThreadPoolExecutor

    from svc_rollout.client import generate

    def one(item: tuple[int, object]) -> list[tuple[bool, int]]:
        i, problem = item
        spec = events.VerifierSpec(kind="arith", gold=problem.answer)
        return [(scorer.score(s.text, spec).correct is True, s.policy_version)
                for s in generate(rollout, problem.text, n=samples, max_new_tokens=8, seed=i + 1)]

    with ThreadPoolExecutor(16) as pool:
        results = [r for part in pool.map(one, enumerate(asked)) for r in part]
    return sum(ok for ok, _ in results) / len(results), {v for _, v in results}


def wait_for_version(rollout: str, version: int, timeout: float = 120.0) -> None:
    from svc_rollout.client import generate

    deadline = time.monotonic() + timeout
    while generate(rollout, "1+1=", max_new_tokens=1)[0].policy_version < version:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the rollout service did not load policy v{version}")
        time.sleep(1)


def test_loop_with_vllm_on_a_qwen2_policy_learns(tmp_path, qwen2_policy):
    """The production engine in the whole loop: a small Qwen2 (transformers' architecture) sampled by
    vLLM, scored, trained by the learner, reloaded in place. The prompts are 64 problems asked over
    and over, so a few minutes of CPU training move the policy measurably: their accuracy, sampled
    by the rollout service itself (64 x 8 samples), rises from the first policy to the last."""
    pytest.importorskip("vllm")
    from m1flow import checkpoint
    from ops.demo import rl_lr

    batch, versions = 16, 96
    asked = problems(seed=3, n=64, max_operand=12)
    stack = Stack(tmp_path, model=qwen2_policy, service_args={
        "learner": ["--batch-groups", str(batch), "--train", json.dumps({"lr": rl_lr(qwen2_policy), "minibatches": 2})],
        "rollout": ["--engine", "vllm", "--group-size", "8"]})
    from svc_reward.client import LocalScorer

    scorer = LocalScorer()
    try:
        stack.start(services=("learner", "reward", "rollout"))
        rollout = stack.get("rollout").grpc_address
        before, first = sampled_accuracy(rollout, asked, scorer)
        # dynamic sampling skips the groups all right or all wrong: publish enough for 96 full batches
        publish(Producer(stack.bootstrap, "test"), asked * (4 * batch * (versions + 8) // len(asked)), 8)
        wait_for(lambda: max(policy_versions(stack.bootstrap)) >= versions, 600, f"{versions} policy versions")
        stack.get("learner").stop()
        final = checkpoint.load_state(checkpoint.latest(tmp_path / "learner" / "checkpoints")).version
        wait_for_version(rollout, final)
        after, last = sampled_accuracy(rollout, asked, scorer)
        engines = {r["value"].get("engine") for r in records(stack.bootstrap, "rollouts")}
    finally:
        stack.stop()
        scorer.close()
    print(f"\naccuracy on the prompts trained on (64 x 8, sampled by vLLM): v{min(first)} {before:.3f} -> "
          f"v{max(last)} {after:.3f}")
    assert first == {0} and min(last) >= versions and engines == {"vllm"}
    assert after >= before + 0.04
