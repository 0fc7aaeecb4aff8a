"""The mismatch loop over a real broker: the learner (fp32, recomputing its proximal log-probs, with
token TIS and IcePop) trains on groups whose log-probs come from an engine that disagrees with it (a
perturbed copy of the weights: each tensor plus noise of 10% of its spread); the monitor reads the
mismatch the learner publishes, tightens the correction's bounds through `control`, the learner
applies them; the engine gets the learner's weights again, and the bounds return to the configured ones.
The learner's rate is tiny, so that its weights stay those the engine copied."""
from __future__ import annotations

import json

import torch
import yaml

from m1flow.bus import Producer
from m1flow.bus.topics import SCORED
from m1flow.contracts import events
from ops.stack import Stack
from svc_learner.batching import pack_sequences
from svc_learner.placement import load_trainable
from svc_learner.update import SequenceLogprobs
from tests.integration.helpers import records, wait_for
from tests.integration.test_learner_selection import v2_group
from tests.rl.test_legacy import v1_groups

WEIGHT_NOISE = 0.1  # of each weight tensor's standard deviation, in the perturbed engine's copy
# this engine's copy disagrees by a KL of 0.008 to 0.05 nats per token, depending on the batch
MISMATCH = {"enabled": True, "tighten_after": 2, "relax_after": 2, "kl_high": 0.005, "kl_ok": 0.001}
CORRECTION = {"tis_cap": 2.0, "icepop": {"lo": 0.5, "hi": 2.0}}


def engine_logprobs(policy, groups: list[events.ScoredGroup], weight_noise: float = 0.0) -> list[list[list[float]]]:
    """The log-probs of each sample's tokens under the policy's weights, or under a copy of them with
    noise: what an engine that agrees with the learner reports, or one that does not."""
    model = load_trainable(policy, "cpu", "fp32")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(weight_noise * p.std() * torch.randn(p.shape, generator=gen))
    out = []
    with torch.no_grad():
        for g in groups:
            ids, mask, _ = pack_sequences([list(s.prompt_token_ids) for s in g.samples],
                                          [list(s.token_ids) for s in g.samples],
                                          [[0.0] * len(s.token_ids) for s in g.samples])
            logp = SequenceLogprobs(model)(ids, mask)[0]
            out.append([logp[i][mask[i] > 0].tolist() for i in range(len(g.samples))])
    return out


class Engine:
    """Stands in for the rollout and reward stages: sends groups of real samples stamped with the
    learner's current version, their log-probs exact or perturbed."""

    def __init__(self, stack: Stack) -> None:
        self.stack, self.bootstrap = stack, stack.bootstrap
        self.producer = Producer(self.bootstrap, "test-engine")
        self.templates = v1_groups()[:4]
        policy = stack.initial_policy()
        self.logprobs = {False: engine_logprobs(policy, self.templates),
                         True: engine_logprobs(policy, self.templates, WEIGHT_NOISE)}
        self.sent = 0

    def step(self, perturbed: bool) -> dict[str, float]:
        """One learner step's batch (2 groups); the stats of the version it made."""
        version = max(announced(self.bootstrap))
        for _ in range(2):
            i = self.sent % len(self.templates)
            rewards = [float(k % 2) for k in range(len(self.templates[i].samples))]
            g = v2_group(f"g{self.sent}", rewards, self.templates[i])
            for s, logp in zip(g.samples, self.logprobs[perturbed][i]):
                s.ClearField("logprobs")
                s.logprobs.extend(logp)
                s.policy_version, s.temperature = version, 1.0
            self.producer.send(SCORED, g.group_id, g)
            self.sent += 1
        self.producer.flush()
        wait_for(lambda: version + 1 in announced(self.bootstrap), 60, f"the learner to make v{version + 1}", 0.2)
        return announced(self.bootstrap)[version + 1]


def announced(bootstrap: str) -> dict[int, dict[str, float]]:
    """Policy version -> the stats of the step that made it."""
    return {int(r["value"].get("version", 0)): r["value"].get("stats", {}) for r in records(bootstrap, "policy")}


def corrections(bootstrap: str) -> list[float]:
    return [c["value"]["set_correction"].get("scale", 0.0) for c in records(bootstrap, "control")
            if "set_correction" in c["value"]]


def until(engine: Engine, perturbed: bool, scale_is, steps: int) -> list[dict[str, float]]:
    seen = []
    for _ in range(steps):
        seen.append(engine.step(perturbed))
        if scale_is(seen[-1].get("correction_scale")):
            return seen
    shown = [{k: round(s.get(k, float("nan")), 4) for k in ("correction_scale", "train_infer_corr", "train_infer_k3")}
             for s in seen]
    raise AssertionError(f"after {steps} steps the learner's correction scale is still {shown}; "
                         f"control: {corrections(engine.bootstrap)}")


def test_an_induced_mismatch_tightens_the_bounds_and_its_end_relaxes_them(tmp_path):
    config = tmp_path / "learner.yaml"
    config.write_text(yaml.safe_dump({
        "batch_groups": 2, "batch_timeout_s": 60, "keep_checkpoints": 2,
        "algorithm": {"max_staleness": 1000, "dynamic_sampling": False, "correction": CORRECTION},
        "train": {"lr": 1e-7, "minibatches": 1, "old_logp_source": "recompute", "max_tokens_per_micro_batch": None}}))
    stack = Stack(tmp_path / "run", service_args={"learner": ["--config", str(config)],
                                                  "monitor": ["--mismatch", json.dumps(MISMATCH)]})
    try:
        stack.start(services=("learner", "monitor"))
        engine = Engine(stack)
        healthy = [engine.step(perturbed=False) for _ in range(2)]
        assert all(s["train_infer_corr"] > 0.999 and s["train_infer_k3"] < 1e-5 for s in healthy), healthy
        assert healthy[-1]["correction_scale"] == 1.0 and healthy[-1]["correction_icepop_hi"] == 2.0

        tightened = until(engine, True, lambda scale: scale is not None and scale < 1.0, 12)[-1]
        assert tightened["train_infer_k3"] > 0.005 and tightened["correction_dropped_frac"] > 0
        assert tightened["correction_icepop_hi"] < 2.0 and tightened["correction_tis_cap"] < 2.0
        assert corrections(stack.bootstrap)[0] == 0.5

        until(engine, False, lambda scale: scale == 1.0, 30)
        scales = corrections(stack.bootstrap)
        low = scales.index(min(scales))  # down while the engine disagreed, then back up to the configured
        assert scales[:low + 1] == sorted(scales[:low + 1], reverse=True) and scales[low:] == sorted(scales[low:])
        assert scales[-1] == 1.0 and scales[low] < 1.0
        decisions = [c["value"] for c in records(stack.bootstrap, "control") if "set_correction" in c["value"]]
        for version, stats in sorted(announced(stack.bootstrap).items()):  # the run, for `pytest -s`
            print(f"v{version}", *(f"{k} {stats[k]:.4g}" for k in ("train_infer_corr", "train_infer_k3",
                  "correction_scale", "correction_icepop_hi", "correction_dropped_frac") if k in stats))
        print("set_correction:", scales)
        assert all(d["evidence"]["rule"] == "mismatch" and d["evidence"]["signals"] for d in decisions)
    finally:
        stack.stop()
