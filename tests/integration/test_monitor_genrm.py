"""The GenRM length-bias loop over a real broker: svc_reward scores open-ended groups with a judge
that turns length-biased halfway through the run; svc_monitor detects it within the configured
windows, publishes `recalibrate`; svc_reward recalibrates and the signal falls back under the
threshold. The same run with a judge that stays fair triggers nothing."""
from __future__ import annotations

import json
import random

import pytest

from m1flow.bus import Producer, codec
from m1flow.bus.topics import ROLLOUTS
from m1flow.contracts import events
from ops.stack import Stack
from svc_monitor.client import report

from tests.integration.helpers import records, wait_for

GROUP, GROUPS_PER_WINDOW, WINDOWS = 8, 12, 10
CONSECUTIVE, COOLDOWN = 2, 1
VOCAB = [f"w{i}" for i in range(300)]
# Judgements per group: Swiss rounds over 8 answers in both orders, then the answers against the
# reference (about 30). The judge turns biased after about 4 windows of the run.
BIAS_AFTER = 4 * GROUPS_PER_WINDOW * 30
MONITOR_ARGS = ["--length-bias", json.dumps({"window_groups": GROUPS_PER_WINDOW, "consecutive": CONSECUTIVE,
                                             "cooldown_windows": COOLDOWN})]


def reward_args(bias_after: int) -> list[str]:
    """The quality judge (distinct-word share; ties within 0.05) with a length bonus from `bias_after` on."""
    return ["--genrm", json.dumps({"judge": "quality", "margin": 0.05, "length_bonus": 0.01,
                                   "bonus_after": bias_after, "history": 160})]


def answer(rng: random.Random) -> list[str]:
    """Words whose distinct share (the judge's hidden quality) is drawn independently of their number."""
    n = rng.randint(10, 40)
    distinct = rng.sample(VOCAB, max(1, round(n * rng.uniform(0.3, 1.0))))
    return distinct + [rng.choice(distinct) for _ in range(n - len(distinct))]


def genrm_rollout(group: str, index: int, version: int, words: list[str]) -> events.Rollout:
    rid = f"{group}/{index}"
    return events.Rollout(header=codec.header("test", group_id=group, rollout_id=rid, message_id=rid,
                                              policy_version=version),
                          rollout_id=rid, group_id=group, prompt_id=group, index=index, group_size=GROUP,
                          task_type="open", prompt_text="Tell me about rivers.",
                          token_ids=[VOCAB.index(w) for w in words], logprobs=[-1.0] * len(words),
                          response_text=" ".join(words), finish_reason=events.FINISH_REASON_STOP,
                          policy_version=version, max_new_tokens=64, verifier=events.VerifierSpec(kind="genrm"))


def monitor_metric(bootstrap: str, name: str) -> list[tuple[int, float]]:
    return [(int(r["value"].get("step", 0)), r["value"].get("value", 0.0)) for r in records(bootstrap, "metrics")
            if r["value"]["name"] == name]


def run_windows(stack: Stack) -> None:
    """One policy version per window; each window's groups are scored and evaluated before the next."""
    producer, rng = Producer(stack.bootstrap, "test-genrm"), random.Random(7)
    for version in range(WINDOWS):
        for g in range(GROUPS_PER_WINDOW):
            group = f"v{version}-g{g}"
            for i in range(GROUP):
                producer.send(ROLLOUTS, group, genrm_rollout(group, i, version, answer(rng)))
        producer.flush()
        wait_for(lambda: len(monitor_metric(stack.bootstrap, "monitor/genrm/biased_window")) > version, 90,
                 f"the monitor's window {version}", 0.3)


@pytest.fixture(params=[BIAS_AFTER, 10**9], ids=["turns-biased", "stays-fair"])
def run(request, tmp_path):
    stack = Stack(tmp_path, service_args={"reward": reward_args(request.param), "monitor": MONITOR_ARGS})
    try:
        stack.start(with_demo_policy=False, services=("reward", "monitor"))
        run_windows(stack)
        yield request.param != 10**9, stack
    finally:
        stack.stop()


def test_length_bias_is_detected_recalibrated_and_verified(run):
    turns_biased, stack = run
    corr = dict(monitor_metric(stack.bootstrap, "monitor/genrm/length_corr"))
    biased = dict(monitor_metric(stack.bootstrap, "monitor/genrm/biased_window"))
    assert sorted(biased) == list(range(WINDOWS))  # one window per version, as fed
    commands = [r["value"] for r in records(stack.bootstrap, "control") if "recalibrate" in r["value"]]
    alerts = [a for a in report(stack.get("monitor").grpc_address).alert_log]
    if not turns_biased:
        assert commands == [] and alerts == [], (corr, commands, alerts)
        assert max(corr.values()) < 0.3, corr
        return

    onset = min(v for v, b in biased.items() if b)  # the first window the judge's bias shows in
    assert onset >= 3 and all(corr[v] < 0.3 for v in range(3)), corr  # fair for the first windows
    (command,) = commands  # one recalibration, no more
    evidence = command["evidence"]
    assert evidence["rule"] == "genrm_length_bias" and evidence["windows"] == CONSECUTIVE
    assert int(evidence["version_to"]) <= onset + CONSECUTIVE  # detected within the configured windows
    assert evidence["signals"]["genrm/length_corr"] > evidence["thresholds"]["genrm/length_corr"]
    assert evidence["signals"]["genrm/length_coef"] > evidence["thresholds"]["genrm/length_coef"]

    # svc_reward followed the command: it fitted the length preference and corrected for it
    wait_for(lambda: monitor_metric(stack.bootstrap, "genrm/length_coef_after"), 30, "svc_reward's recalibration")
    (_, before), (_, after) = (monitor_metric(stack.bootstrap, f"genrm/length_coef_{w}")[-1]
                               for w in ("before", "after"))
    assert before > 1.0 and abs(after) < 0.5 * before, (before, after)

    verified = int(evidence["version_to"]) + COOLDOWN + 1  # the first window judged after the cool-down
    assert verified < WINDOWS
    assert all(corr[v] < 0.3 and not biased[v] for v in range(verified, WINDOWS)), corr  # back under threshold
    assert alerts == []  # the recalibration worked: nothing to alert on
