"""The GenRM length-bias loop of `m1flow demo --genrm` end to end over a real broker, every part a real
process: svc_source draws the general family (m1flow.tasks.general), svc_rollout answers with a small
policy cold-started on general answers of 2-12 words, svc_reward judges each group pairwise against its
Swiss-round reference with the known-preference judge (`genrm.judge: general`), which turns
length-biased after BIAS_AFTER judgements, the learner trains on the scores, and svc_monitor's
length-bias rule detects the bias within its configured windows and sends `recalibrate` on `control`.
svc_reward fits the length preference and removes it: the groups it scores afterwards have a mean
within-group rank correlation of reward and length (the rule's signal) within +-0.1 of zero.

tests/integration/test_monitor_genrm.py runs reward and monitor on hand-fed rollouts (one version per
window, a fair judge as control); this one closes the loop through the source, the policy and the learner.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from m1flow.data.dataset import DatasetConfig
from m1flow.stats import spearman
from m1flow.tokenizer import TokenizerConfig
from ops.stack import Stack
from ops.topics_io import read_range
from ops.warmstart import WarmStartConfig
from svc_reward.genrm import CalibrationConfig

from tests.integration.helpers import records, wait_for
from tests.integration.test_monitor_genrm import monitor_metric

pytestmark = pytest.mark.kafka
# windows of the rule's default 16 groups: a judge that buys length outright makes the longest answer the
# reference, which beats nearly every rollout, so a group's rank correlation tops out at 0.58 (one winner of
# 8) and this loop's biased windows read 0.31-0.46 against the rule's 0.3 (8 groups: one of 8 runs had a
# window after the onset just under it, 2026-12-06, and the detection came with the next two)
GROUP, BATCH, WINDOW_GROUPS, CONSECUTIVE, COOLDOWN = 8, 4, 16, 2, 1
# about 30 judgements per group of 8 (Swiss rounds in both orders, then each answer against the
# reference): the judge turns biased after about 3 of the rule's windows
BIAS_AFTER = 3 * WINDOW_GROUPS * 30
AFTER_GROUPS = 96  # groups scored after the recalibration the correlation is read over (its SE about 0.035)
# a policy that answers general instructions with 2-12 words: lengths a judge can prefer
POLICY = WarmStartConfig(task="mixture", steps=150, open_words=(2, 12),
                         mixture=[DatasetConfig(generator="general", weight=1.0, size=2000, seed=5)],
                         tokenizer=TokenizerConfig(prompts_of=["general"]))
# history: the verdicts of the rule's evidence windows (7 answers against the reference per group), so the
# fit is made on the judge as it is now; a longer one, still mostly fair verdicts when the bias is
# detected, fits half the preference (measured: b1 2.2 -> 1.1 with 1024) and the rule has to ask again
HISTORY = CONSECUTIVE * WINDOW_GROUPS * 7
JUDGE = {"judge": "general", "margin": 0.05, "length_bonus": 0.05, "bonus_after": BIAS_AFTER, "history": HISTORY}


def service_args(settings: Path) -> dict[str, list[str]]:
    return {"source": ["--config", str(settings)],
            "rollout": ["--engine", "native", "--group-size", str(GROUP), "--max-new-tokens", "40"],
            "reward": ["--genrm", json.dumps(JUDGE)],
            "learner": ["--batch-groups", str(BATCH), "--train", json.dumps({"lr": 1e-5, "minibatches": 1})],
            "monitor": ["--length-bias", json.dumps({"window_groups": WINDOW_GROUPS, "consecutive": CONSECUTIVE,
                                                     "cooldown_windows": COOLDOWN})]}


def general_groups(bootstrap: str) -> list[tuple[int, float | None]]:
    """(timestamp, within-group rank correlation of GenRM reward and token length) per scored group."""
    out = []
    for record in read_range(bootstrap, "scored"):
        value = record["value"]
        if value.get("source") != "general":
            continue
        samples = [s for s in value.get("samples", []) if s.get("status") == "STATUS_OK"]
        rewards = np.array([s.get("parts", {}).get("genrm", 0.0) for s in samples])
        lengths = np.array([len(s.get("token_ids", [])) for s in samples], dtype=float)
        out.append((int(record["timestamp_ms"]), spearman(rewards, lengths) if len(samples) >= 3 else None))
    return out


def fitted_at(bootstrap: str) -> int | None:
    """When svc_reward published its first recalibration's fit."""
    stamps = [int(r["timestamp_ms"]) for r in read_range(bootstrap, "metrics")
              if r["value"]["name"] == "genrm/length_coef_after"]
    return min(stamps) if stamps else None


def scored_after(bootstrap: str) -> list[float]:
    at = fitted_at(bootstrap)
    if at is None:
        return []
    return [c for ts, c in general_groups(bootstrap) if ts > at and c is not None]


@pytest.fixture
def stack(tmp_path):
    settings = tmp_path / "sources.json"
    settings.write_text(json.dumps({"sources": [{"generator": "general", "weight": 1.0, "size": 5000, "seed": 1}],
                                    "group_size": GROUP, "batch_groups": BATCH}))
    stack = Stack(tmp_path / "run", warmstart=POLICY, service_args=service_args(settings))
    try:
        stack.start(services=("learner", "reward", "rollout", "monitor", "source"))
        yield stack
    finally:
        stack.stop()


def test_the_general_family_turns_biased_is_recalibrated_and_its_bias_is_gone(stack):
    boot = stack.bootstrap
    wait_for(lambda: any("recalibrate" in r["value"] for r in records(boot, "control")), 600,
             "the monitor's recalibrate", 2.0)
    wait_for(lambda: len(scored_after(boot)) >= AFTER_GROUPS, 600,
             f"{AFTER_GROUPS} general groups scored after svc_reward's recalibration", 2.0)

    windows = [b for _, b in monitor_metric(boot, "monitor/genrm/biased_window")]
    corr = [c for _, c in monitor_metric(boot, "monitor/genrm/length_corr")]
    steps = [s for s, _ in monitor_metric(boot, "monitor/genrm/biased_window")]
    onset = windows.index(1.0)  # the first window the rule found biased
    assert onset >= 1 and all(c < 0.3 for c in corr[:onset]), corr  # the judge was fair at first

    # the detection; a later command is the audit's (svc_monitor asks again for a residual it can tell from 0)
    command, *again = [r["value"] for r in records(boot, "control") if "recalibrate" in r["value"]]
    assert len(again) <= 2, again
    evidence = command["evidence"]
    assert evidence["rule"] == "genrm_length_bias" and evidence["windows"] == CONSECUTIVE, evidence
    # detected with the first CONSECUTIVE biased windows in a row (how soon after the bias starts that is,
    # over many streams, is tests/monitor/test_length_bias_stream.py's; here a window's noise can break a run)
    streak = next(i for i in range(CONSECUTIVE - 1, len(windows)) if all(windows[i - CONSECUTIVE + 1:i + 1]))
    assert int(evidence.get("version_to", 0)) <= steps[streak], (evidence, steps, windows)
    assert evidence["signals"]["genrm/length_corr"] > evidence["thresholds"]["genrm/length_corr"]

    before = min(monitor_metric(boot, "genrm/length_coef_before"))[1]  # the first fit's (svc_reward's step 1)
    after = min(monitor_metric(boot, "genrm/length_coef_after"))[1]
    assert before > CalibrationConfig().min_coefficient and abs(after) < 0.5 * before, (before, after)

    later = scored_after(boot)
    assert abs(float(np.mean(later))) < 0.1, (float(np.mean(later)), len(later), corr)
