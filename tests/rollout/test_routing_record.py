"""The native engine records each sample's routing (R3) when configured, and svc_rollout puts it on
the Rollout as it came: the experts a full forward over prompt + sample routes to."""
from __future__ import annotations

import pydantic
import pytest
import torch

from m1flow import checkpoint
from m1flow.contracts import events
from m1flow.engines.base import GroupRequest, GroupResult
from m1flow.engines.native import NativeEngine
from m1flow.model.routing import recording
from m1flow.routed_experts import RoutingShape, decode
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, build_model
from svc_rollout.config import RolloutConfig
from svc_rollout.rollouts import rollouts_for

TEXTS = ["What is 3 + 4?", "What is 12 - 5?"]


@pytest.fixture(scope="module")
def hybrid_policy(tmp_path_factory):
    """An untrained two-layer hybrid policy directory: routing is recorded whatever the weights."""
    tok = build_tokenizer()
    model = build_model(tok, WarmStartConfig(arch="minimax_m1", model_overrides={"num_hidden_layers": 2}))
    return checkpoint.save_policy(tmp_path_factory.mktemp("policy") / "hybrid", model, tok)


def policy(directory) -> events.PolicyVersion:
    return events.PolicyVersion(version=0, checkpoint_uri=checkpoint.uri_for(directory),
                                sha256=checkpoint.weights_sha256(directory))


def run(engine: NativeEngine) -> list[GroupResult]:
    for i, text in enumerate(TEXTS):
        engine.submit(GroupRequest(f"g-{i}", engine.prompt_ids(text), 2, 10, 1.0, 0.95, i, 3000, 0.99))
    out: list[GroupResult] = []
    while engine.in_flight():
        out += engine.step()
    return sorted(out, key=lambda r: r.request.key)


def test_native_engine_records_routing_onto_each_rollout(hybrid_policy):
    engine = NativeEngine(batch_groups=2, group_size=2, device="cpu", record_routing=True)
    engine.load(policy(hybrid_policy))
    cfg = engine.model.config
    shape = RoutingShape(cfg.num_hidden_layers, cfg.num_experts_per_tok, cfg.num_local_experts)
    for result in run(engine):
        prompt = events.Prompt(prompt_id=result.request.key, text="q", task_type="arith")
        rollouts = rollouts_for(prompt, result, engine, "run")
        for sample, rollout in zip(result.samples, rollouts):
            assert rollout.routed_experts == sample.routed_experts
            ids = result.request.prompt_ids + sample.tokens
            experts = decode(rollout.routed_experts, shape, len(ids) - 1)
            with torch.no_grad(), recording(engine.model) as recorder:
                engine.model(torch.tensor([ids]))
                full = recorder.take()[0, :-1].long()
            assert torch.equal(experts.sort(-1).values, full.sort(-1).values)


def test_without_recording_a_rollout_has_no_routing(hybrid_policy):
    engine = NativeEngine(batch_groups=2, group_size=2, device="cpu")
    engine.load(policy(hybrid_policy))
    result = run(engine)[0]
    rollout = rollouts_for(events.Prompt(prompt_id="p", text="q"), result, engine, "run")[0]
    assert result.samples[0].routed_experts is None and not rollout.HasField("routed_experts")


def test_only_the_native_engine_may_record():
    with pytest.raises(pydantic.ValidationError, match="record_routing"):
        RolloutConfig(engine="hf", record_routing=True)
    assert RolloutConfig(engine="native", record_routing=True).record_routing
