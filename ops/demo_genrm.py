"""`m1flow demo --genrm`: the report's GenRM control loop inside the demo's run.

The verifiable families train alone first; then the monitor's curriculum ramps in a general family
(m1flow.tasks.general: "Write a few sentences about rivers. Mention: water, bank, flow.", no gold),
which svc_reward scores pairwise against each group's Swiss-round reference with a judge whose
preferences are known (`genrm.judge: general`: the answer's hidden quality, named words covered times
distinct-word share). After `bonus_after` judgements that judge also pays for length, as the report's
GenRM came to; svc_monitor's length-bias rule reads the within-group correlation of GenRM reward and
length per window, sends `recalibrate` on `control` with its evidence, and svc_reward fits and removes
the length preference (svc_reward/genrm/calibration.py). The summary reads the episode back from the
bus: the bias before and after the recalibration with 95% intervals, the versions it was detected and
recalibrated at, and the general answers' length and hidden quality over the run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from m1flow.chat import after_reasoning
from m1flow.data.dataset import DatasetConfig
from m1flow.data.generators import generate
from m1flow.stats import bootstrap_interval, spearman
from m1flow.tasks.general import quality

# The general family: weight 0 until the curriculum ramps it in (svc_source draws none at weight 0).
GENERAL = DatasetConfig(generator="general", weight=0.0, level=1, size=20_000, seed=1)
# Its share of the cold start's SFT examples (0.2 of 1.2: a sixth), and the steps that keep the
# verifiable families' examples at the default demo's 1500 steps' worth.
GENERAL_SFT_WEIGHT = 0.2
GENRM_COLD_START_STEPS = 1800
# svc_reward's judge: the hidden quality, ties within 0.05; from `bonus_after` judgements on, 0.05 per
# character of answer on top (about 30 judgements per group of 8: Swiss rounds in both orders, then
# every answer against the reference), i.e. after about 130 general groups. 0.05, not 0.01: on answers
# of 2-6 words (the cold start's) the hidden quality falls with length (repeats), and a fair judge's
# windows read a rank correlation of -0.16; 0.01 a character only brings it to -0.04 (never seen as
# biased), 0.05 to +0.43 (every window biased), which recalibration takes to -0.02 (simulated with
# svc_reward's scorer and the monitor's rule, 12 windows of 16 groups each way).
# history: the raw verdicts (and, as many, Swiss games between peers, which b1 is fitted on) the first
# recalibration is fitted on, about the monitor's two evidence windows of 16 groups (7 answers against the
# reference each): a longer one, mostly verdicts from before the bias when it is detected, fits only part of
# it (the broker test measured b1 2.2 -> 1.1 with 1024, and the rule asked again). A later recalibration
# adds a stage fitted on the verdicts as the correction scored them since the one before.
GENRM_JUDGE = {"judge": "general", "margin": 0.05, "length_bonus": 0.05, "bonus_after": 4000, "history": 256}
# The curriculum: the report's order, verifiable sources first (3 windows of 48 groups), then the
# general family ramped in to weight 0.3 (a share of 0.3 / 1.3) over 3 windows.
GENRM_RAMP = {"general": 0.3}


def verifiable(sources: list[DatasetConfig]) -> list[DatasetConfig]:
    """The sources a rule verifier scores (held-out sets are measured on these; a judged family has no
    gold to score a held-out sample by)."""
    return [d for d in sources if not d.generator or generate(d.generator, d.seed, 0, d.level, d.config)
            .verifier.kind != "genrm"]


def curriculum(sources: list[DatasetConfig]) -> dict:
    """svc_monitor's `curriculum:` block: verifiable sources alone, then the general family ramped in."""
    start = {d.source_name: d.weight for d in sources}
    return {"window_groups": 48, "min_judged": 24, "stages": [
        {"name": "verifiable", "weights": start, "until": [{"signal": "stage_windows", "above": 2}]},
        {"name": "general", "weights": start, "ramp": {"weights": GENRM_RAMP, "windows": 3}}]}


def cold_start_mixture(sources: list[DatasetConfig]) -> list[DatasetConfig]:
    """The SFT mixture: the run's sources, the judged family at GENERAL_SFT_WEIGHT (its run weight is 0)."""
    return [d.model_copy(update={"weight": GENERAL_SFT_WEIGHT}) if d not in verifiable(sources) else d
            for d in sources]


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}] ({self.n} groups with an ordering)"


def bootstrap(values: list[float], draws: int = 2000, seed: int = 0) -> Interval | None:
    """Mean with a 95% percentile bootstrap interval over the values (groups: the rule's unit)."""
    if not values:
        return None
    low, high = bootstrap_interval(values, resamples=draws, seed=seed)
    return Interval(float(np.mean(values)), low, high, len(values))


@dataclass(frozen=True)
class GeneralGroup:
    """One scored group of the judged family, as the episode's summary reads it."""

    version: int
    ts_ms: int
    rewards: list[float]
    lengths: list[int]  # tokens, as the monitor's rule counts
    quality: list[float]  # the hidden quality of each answer (never seen by the judge's length term)

    @property
    def corr(self) -> float | None:
        if len(self.rewards) < 3:
            return None
        return spearman(np.array(self.rewards), np.array(self.lengths, dtype=float))


def general_groups(scored: list[dict], decode: Callable[[list[int]], str], prompt_of: Callable[[list[int]], str],
                   source: str = "general") -> list[GeneralGroup]:
    """The judged family's groups from `scored` records (read_range dicts): answers decoded with `decode`,
    prompts with `prompt_of`."""
    out = []
    for record in scored:
        value = record.get("value") or {}
        if value.get("source") != source:
            continue
        samples = [s for s in value.get("samples", []) if s.get("status", "STATUS_OK") == "STATUS_OK"]
        if not samples:
            continue
        prompt = prompt_of(samples[0].get("prompt_token_ids", []))
        out.append(GeneralGroup(
            version=min(int(s.get("policy_version", 0)) for s in samples),
            ts_ms=int(record.get("timestamp_ms") or 0),
            rewards=[float(s.get("parts", {}).get("genrm", 0.0)) for s in samples],
            lengths=[len(s.get("token_ids", [])) for s in samples],
            quality=[quality(prompt, decode(s.get("token_ids", []))) for s in samples]))
    return out


@dataclass(frozen=True)
class Episode:
    """The length-bias episode of a run, read back from the bus."""

    groups: list[GeneralGroup]
    detected: dict | None  # the first recalibrate command's evidence (versions, signals, thresholds)
    recalibrated_ms: int | None  # when svc_reward published its first fit
    fit: dict[str, float]  # svc_reward's first length coefficients before/after
    fits: list[dict[str, float]] = field(default_factory=list)  # every fit in order: before, after, stages, ts_ms

    def later(self) -> list[tuple[dict[str, float], list[GeneralGroup]]]:
        """Each fit with the groups scored under it (after it, before the next one)."""
        ends = [f["ts_ms"] for f in self.fits[1:]] + [2**62]
        return [(f, [g for g in self.groups if f["ts_ms"] < g.ts_ms < end]) for f, end in zip(self.fits, ends)]

    def phases(self) -> dict[str, list[GeneralGroup]]:
        """Groups before the evidence's windows; from them until svc_reward applied the recalibration (the
        bias the rule saw, and what was scored while the command was on its way); scored after it."""
        if self.detected is None:
            return {"whole run": self.groups}
        lo = int(self.detected.get("version_from", 0))
        fitted = self.recalibrated_ms or 2**62
        return {"before the evidence": [g for g in self.groups if g.version < lo and g.ts_ms < fitted],
                "biased (evidence to recalibration)": [g for g in self.groups if g.version >= lo and g.ts_ms < fitted],
                "after recalibration": [g for g in self.groups if g.ts_ms > fitted]}


def thirds(groups: list[GeneralGroup]) -> list[tuple[str, float, float, int]]:
    """(versions, mean length, mean hidden quality, answers) per third of the versions with general groups."""
    versions = sorted({g.version for g in groups})
    out = []
    for i in range(3):
        chosen = set(versions[len(versions) * i // 3 : len(versions) * (i + 1) // 3])
        part = [g for g in groups if g.version in chosen]
        lengths = [n for g in part for n in g.lengths]
        qualities = [q for g in part for q in g.quality]
        if lengths:
            out.append((f"v{min(chosen)}-{max(chosen)}", float(np.mean(lengths)), float(np.mean(qualities)),
                        len(lengths)))
    return out


def print_episode(ep: Episode, say=print) -> dict:
    """The episode's lines; returns its numbers (for the README's table)."""
    say(f"\nGenRM length bias (svc_monitor's rule: mean within-group rank correlation of GenRM reward and "
        f"length; 95% bootstrap interval over groups); {len(ep.groups)} general groups scored")
    numbers: dict = {}
    if ep.detected is None:
        say("  no recalibrate command on control: the rule did not find the judge biased")
    else:
        signals = ", ".join(f"{k} {v:.3f}" for k, v in sorted(ep.detected.get("signals", {}).items()))
        say(f"  detected on windows of v{ep.detected.get('version_from')}-v{ep.detected.get('version_to')} "
            f"({ep.detected.get('windows')} window(s) in a row; {signals}); recalibrate sent on control")
        after = [g.version for g in ep.groups if ep.recalibrated_ms and g.ts_ms > ep.recalibrated_ms]
        numbers["recalibrated"] = min(after) if after else None
        if ep.fit:
            say(f"  svc_reward's fit (its first general group after it: v{numbers['recalibrated']}): length coefficient {ep.fit.get('length_coef_before', 0):.2f} -> "
                f"{ep.fit.get('length_coef_after', 0):.2f}")
        numbers["detected"] = (ep.detected.get("version_from"), ep.detected.get("version_to"))
    for name, part in ep.phases().items():
        iv = bootstrap([c for g in part if (c := g.corr) is not None])
        say(f"  {name:<32} corr {iv if iv else '- (no groups)'}" +
            (f"; versions v{min(g.version for g in part)}-v{max(g.version for g in part)}" if part else ""))
        numbers[name] = iv
    if len(ep.fits) > 1:
        say(f"  every recalibration ({len(ep.fits)}): svc_reward's fit, then the groups scored under it")
        for i, (fit, part) in enumerate(ep.later(), 1):
            iv = bootstrap([c for g in part if (c := g.corr) is not None])
            say(f"    #{i}: length coefficient {fit.get('length_coef_before', 0):.2f} -> "
                f"{fit.get('length_coef_after', 0):.2f}, {int(fit.get('calibration_stages', 1))} stage(s); corr "
                f"{iv if iv else '- (no groups)'}" +
                (f"; v{min(g.version for g in part)}-v{max(g.version for g in part)}" if part else ""))
    numbers["recalibrations"] = len(ep.fits)
    say("  general answers per third of the run | versions | mean length (tokens) | hidden quality | answers")
    for label, length, q, n in thirds(ep.groups):
        say(f"  {'':<37}| {label:>8} | {length:>20.2f} | {q:>14.3f} | {n}")
    numbers["thirds"] = thirds(ep.groups)
    return numbers



def read_episode(bootstrap: str, run_id: str, policy: Path) -> Episode:
    """The episode from the bus: `scored` (the general groups, decoded with the policy's tokenizer and
    valued by the hidden quality on the text the judge read), the monitor's `recalibrate` on `control`
    and svc_reward's fit on `metrics`."""
    from transformers import AutoTokenizer

    from ops.topics_io import read_range

    tok = AutoTokenizer.from_pretrained(policy)
    decode = lambda ids: after_reasoning(tok.decode(ids, skip_special_tokens=True))  # noqa: E731
    prompt_of = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    groups = general_groups(list(read_range(bootstrap, "scored")), decode, prompt_of)
    commands = [r["value"] for r in read_range(bootstrap, "control") if "recalibrate" in r.get("value", {})
                and r["value"].get("header", {}).get("trace", {}).get("run_id", "") in (run_id, "")]
    fits: dict[tuple, dict[str, float]] = {}  # (replica, its count of recalibrations) -> the fit
    for record in read_range(bootstrap, "metrics"):
        value = record.get("value", {})
        name = value.get("name", "")
        if name in ("genrm/length_coef_before", "genrm/length_coef_after", "genrm/calibration_stages"):
            key = (tuple(sorted(value.get("labels", {}).items())), int(value.get("step", 0)))
            fit = fits.setdefault(key, {})
            fit[name.split("/", 1)[1]] = float(value.get("value", 0.0))
            if name == "genrm/length_coef_after":
                fit["ts_ms"] = int(record.get("timestamp_ms") or 0)
    ordered = sorted((fit for fit in fits.values() if "ts_ms" in fit), key=lambda fit: fit["ts_ms"])
    first = ordered[0] if ordered else {}
    return Episode(groups, commands[0].get("evidence") if commands else None, first.get("ts_ms"),
                   {k: v for k, v in first.items() if k.startswith("length_coef_")}, ordered)
