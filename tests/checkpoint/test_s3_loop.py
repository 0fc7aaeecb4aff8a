"""The whole loop with its policies on a real S3-compatible server instead of a shared directory:
the learner service (`--checkpoint-uri s3://...`) writes and announces every version there, the
rollout service downloads each into its cache, checks it and samples with it, configured only by
the `store` block a deployment gives both (no directory in common but the server's)."""
from __future__ import annotations

import pytest

from m1flow.bus import Producer
from ops.stack import Stack
from ops.feed import publish
from m1flow.tasks.arith import problems

from tests.checkpoint.test_s3_checkpoints import objects
from tests.integration.helpers import records, scored_by_group, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
N_PROMPTS, GROUP, BATCH = 8, 4, 4


def test_the_loop_runs_on_policies_in_the_object_store(s3_server, tmp_path) -> None:
    store = s3_server.config().model_dump_json()
    stack = Stack(tmp_path, service_args={
        "learner": ["--batch-groups", str(BATCH), "--algorithm", '{"dynamic_sampling": false}',
                    "--checkpoint-uri", f"s3://{s3_server.bucket}/loop/ckpt", "--store", store],
        "rollout": ["--max-ahead-versions", "0", "--store", store]})
    try:
        stack.start(services=("learner", "reward", "rollout"))
        publish(Producer(stack.bootstrap, "test"), problems(seed=5, n=N_PROMPTS, max_operand=20), GROUP)
        wait_for(lambda: len(scored_by_group(stack.bootstrap)) >= N_PROMPTS, 240, "all groups scored")
        sampled = lambda: {int(r["value"].get("policy_version", 0))  # noqa: E731
                           for r in records(stack.bootstrap, "rollouts")}
        # groups 5-8 wait (max-ahead 0) for the first trained version: sampled with it, from the store
        wait_for(lambda: max(sampled()) >= 1, 180, "rollouts sampled with a trained version", detail=sampled)
        policies = [r["value"] for r in records(stack.bootstrap, "policy")]
        assert policies and all(p["checkpoint_uri"].startswith(f"s3://{s3_server.bucket}/loop/ckpt/v")
                                for p in policies)
    finally:
        stack.stop()
    assert not (tmp_path / "learner" / "checkpoints").exists()  # nothing written to the run dir's root
    assert objects(s3_server, "loop/ckpt/v000000/")
    cache = tmp_path / "rollout" / "policy-cache-0"
    assert cache.is_dir() and [p for p in cache.iterdir() if p.name.startswith("v")]
