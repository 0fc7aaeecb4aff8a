"""`m1flow demo --genrm`: the general family joins at weight 0 and the curriculum ramps it in after the
verifiable sources; held-out sets stay on the verifiable ones; the cold start answers general prompts
with a few words (and the default demo's cold start is untouched); the summary reads its episode from
`scored` records as the bus writes them."""
from __future__ import annotations

import random

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.tasks.general import quality, required_words
from ops import demo_genrm
from ops.demo import DEMO_SOURCES, DemoConfig, eval_sets, warmstart_for
from ops.warmstart import mixture_examples
from svc_monitor.schedule import CurriculumConfig


def test_the_general_family_is_ramped_in_after_the_verifiable_sources():
    cfg = DemoConfig(genrm=True)
    assert [d.source_name for d in cfg.sources] == [d.source_name for d in DEMO_SOURCES] + ["general"]
    assert {d.source_name: d.weight for d in cfg.sources}["general"] == 0.0  # not drawn until the curriculum says
    schedule = CurriculumConfig(**cfg.curriculum)
    first, then = schedule.stages
    assert first.weights["general"] == 0 and "general" not in first.fed_sources()
    assert then.ramp is not None and then.ramp.weights["general"] > 0
    assert {s.set_name for s in eval_sets(cfg)} == {d.source_name for d in DEMO_SOURCES}
    assert DemoConfig().sources == cfg.sources  # the main job's default
    plain = DemoConfig(genrm=False)
    assert plain.sources == DEMO_SOURCES and plain.curriculum == {}  # --no-genrm: the verifiable mixture as it was


def test_the_cold_start_answers_general_prompts_with_a_few_words_and_the_verifiable_ones_as_before():
    warm = warmstart_for("native", DemoConfig(genrm=True).sources)
    assert "general" in warm.tokenizer.prompts_of
    examples = mixture_examples(warm, 600, random.Random(0))
    general = [(r.prompt, a) for r, a in examples if r.verifier.kind == "genrm"]
    share = len(general) / len(examples)
    assert 0.1 < share < 0.25, share
    assert round(warm.steps * (1 - demo_genrm.GENERAL_SFT_WEIGHT / 1.2)) == warmstart_for("native", DEMO_SOURCES).steps
    lengths = [len(a.split()) for _, a in general]
    assert min(lengths) >= 2 and max(lengths) <= 6 + 3 and len(set(lengths)) >= 3  # varied, room to grow
    qualities = [quality(p, a) for p, a in general]
    assert 0.1 < sum(qualities) / len(qualities) < 0.9 and len(set(qualities)) > 10  # a judge has something to rank


def scored_group(group: str, version: int, prompt: list[int], answers: list[list[int]], rewards: list[float],
                 source: str = "general") -> dict:
    msg = events.ScoredGroup(header=codec.header("test"), group_id=group, source=source, verifier_kind="genrm")
    for i, (ids, reward) in enumerate(zip(answers, rewards)):
        msg.samples.add(index=i, reward=reward, parts=events.RewardParts(genrm=reward), policy_version=version,
                        prompt_token_ids=prompt, token_ids=ids, status=events.STATUS_OK)
    return {"value": codec.to_json(msg), "timestamp_ms": 1000 * version}


def test_the_episode_is_read_from_scored_records():
    words = ["Mention:", "water,", "bank,", "flow.", "water", "bank", "flow", "the", "the"]
    decode = lambda ids: " ".join(words[i] for i in ids)  # noqa: E731
    prompt = [0, 1, 2, 3]
    answers = [[4], [4, 5], [4, 5, 6], [7, 7, 7, 4]]
    records = [scored_group(f"g{v}", v, prompt, answers, [-1.0, 0.0, 1.0, 1.0]) for v in range(1, 10)]
    records.append(scored_group("arith", 5, prompt, answers, [1.0, 0, 0, 0], source="arith"))
    groups = demo_genrm.general_groups(records, decode, decode)
    assert len(groups) == 9 and required_words(decode(prompt)) == ["water", "bank", "flow"]
    g = groups[0]
    assert g.lengths == [1, 2, 3, 4] and g.rewards == [-1.0, 0.0, 1.0, 1.0] and g.version == 1
    assert g.quality == [quality(decode(prompt), decode(a)) for a in answers] and g.quality[2] == 1.0
    assert g.corr is not None and g.corr > 0.9
    episode = demo_genrm.Episode(groups, {"version_from": 3, "version_to": 4, "windows": 2, "signals": {}}, 6500, {})
    phases = episode.phases()
    assert [[g.version for g in part] for part in phases.values()] == [[1, 2], [3, 4, 5, 6], [7, 8, 9]]
    thirds = demo_genrm.thirds(groups)
    assert [t[0] for t in thirds] == ["v1-3", "v4-6", "v7-9"] and all(t[1] == 2.5 and t[3] == 12 for t in thirds)
    lines: list[str] = []
    numbers = demo_genrm.print_episode(episode, say=lines.append)
    assert numbers["detected"] == (3, 4) and numbers["recalibrated"] == 7 and numbers["after recalibration"].n == 3
    assert numbers["recalibrations"] == 0 and not any("every recalibration" in line for line in lines)
    fits = [{"length_coef_before": 4.8, "length_coef_after": 0.6, "calibration_stages": 1, "ts_ms": 6500},
            {"length_coef_before": 1.3, "length_coef_after": 0.1, "calibration_stages": 2, "ts_ms": 8500}]
    twice = demo_genrm.Episode(groups, episode.detected, 6500, {}, fits)
    assert [[g.version for g in part] for _, part in twice.later()] == [[7, 8], [9]]
    lines = []
    assert demo_genrm.print_episode(twice, say=lines.append)["recalibrations"] == 2
    assert any("#2: length coefficient 1.30 -> 0.10, 2 stage(s)" in line and "v9-v9" in line for line in lines), lines
    interval = demo_genrm.bootstrap([0.1, 0.2, 0.3, 0.4])
    assert interval is not None and interval.low <= interval.mean <= interval.high
