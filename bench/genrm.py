"""GenRM rewards: what the scorer costs over the judge, what Swiss rounds save over a round robin,
and where the length recalibration lands.

Why: svc_reward turns judge verdicts into rewards through Swiss rounds, position-switched pairs and the
length correction; this shows the scorer's cost next to calling the judge directly, the judge calls a
group needs (Swiss rounds against the full round robin a tournament without them plays), and the
within-group length correlation of the rewards before and after a recalibration, with the old
per-verdict correction side by side. The judge is the general tasks' known-preference judge
(svc_reward.genrm.InstructionJudge over m1flow.tasks.general), pure Python: the throughput rows are
the scorer's own overhead, the upper bound a real judge model divides.

    PYTHONPATH=. python bench/genrm.py [throughput|calls|calibration ...] [--groups 200]
"""
from __future__ import annotations

import argparse
import random
import time

import numpy as np

from m1flow.contracts import events
from m1flow.stats import spearman
from m1flow.tasks.general import make_instruction, quality, sample_answer
from svc_reward.genrm import Comparer, GenRMConfig, GenRMKindConfig, GenRMScorer, InstructionJudge, LengthCalibrator
from svc_reward.genrm.calibration import LengthRecord
from svc_reward.verifiers.genrm import GenRMKind

SIZES = (4, 8, 16)
BIASES = (0.0, 0.003, 0.01, 0.03)


class CountingJudge:
    """The judge with the calls it was asked (what an HTTP judge bills)."""

    def __init__(self, inner: InstructionJudge) -> None:
        self.inner, self.asked = inner, []

    @property
    def calls(self) -> int:
        return len(self.asked)

    def judge(self, prompt: str, first: str, second: str):
        self.asked.append((prompt, first, second))
        return self.inner.judge(prompt, first, second)


def groups_of(size: int, n: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = make_instruction(rng)
        out.append((prompt, [sample_answer(rng, prompt) for _ in range(size)]))
    return out


def throughput(size: int, groups: int) -> tuple[float, float, float, int]:
    """(judgements/s and rewards/s through GenRMKind as svc_reward builds it, judgements/s calling the
    judge directly on the same pairs in the same order, judge calls)."""
    data = groups_of(size, groups)
    kind = GenRMKind.from_config(GenRMKindConfig(judge="general", margin=0.05))
    counter = kind.scorer.judge = CountingJudge(kind.scorer.judge)
    spec = events.VerifierSpec(kind="genrm")
    start = time.perf_counter()
    for prompt, answers in data:
        kind.score_group(prompt, answers, spec)
    scored = time.perf_counter() - start
    judge = InstructionJudge(quality, margin=0.05)
    start = time.perf_counter()
    for prompt, a, b in counter.asked:
        judge.judge(prompt, a, b)
    direct = time.perf_counter() - start
    return counter.calls / scored, groups * size / scored, counter.calls / direct, counter.calls


def round_robin_calls(prompt: str, answers: list[str]) -> int:
    """Judge calls of a full round robin in both orders (every pair once, cached as the scorer does)."""
    counter = CountingJudge(InstructionJudge(quality, margin=0.05))
    comparer = Comparer(counter)
    for i, a in enumerate(answers):
        for b in answers[i + 1:]:
            comparer.compare(prompt, a, b)
    return counter.calls


def calls(size: int, groups: int) -> tuple[float, float, float]:
    """(judge calls per group through the scorer: Swiss rounds + each rollout against the reference,
    calls per group of a round robin, how often the Swiss reference is the group's best answer)."""
    swiss, robin, best = 0, 0, 0
    for prompt, answers in groups_of(size, groups, seed=1):
        counter = CountingJudge(InstructionJudge(quality, margin=0.05))
        result = GenRMScorer(counter).score_group(prompt, answers)
        swiss += counter.calls
        robin += round_robin_calls(prompt, answers)
        best += quality(prompt, result.reference) >= max(quality(prompt, a) for a in answers) - 0.05
    return swiss / groups, robin / groups, best / groups


def length_correlation(score, groups: list[tuple[str, list[str]]]) -> tuple[float, int]:
    """Mean within-group rank correlation of rewards and length (svc_monitor's genrm/length_corr), and
    the groups with any ordering it was read from."""
    corrs = [spearman(np.array(score(prompt, answers)), np.array([len(a) for a in answers]))
             for prompt, answers in groups]
    corrs = [c for c in corrs if c is not None]
    return (float(np.mean(corrs)) if corrs else 0.0), len(corrs)


def per_verdict_rewards(scorer: GenRMScorer, calibrator: LengthCalibrator, prompt: str,
                        answers: list[str]) -> list[float]:
    """The old correction: each verdict mapped to its expectation under one pooled fit, the reference
    left at its tie with itself."""
    result = scorer.score_group(prompt, answers)
    return [r.reward if a == result.reference else calibrator.correct(r.reward, len(a), len(result.reference))
            for a, r in zip(answers, result.results)]


def calibration(bias: float, groups: int, seed: int) -> dict[str, float]:
    """One stream: `groups` groups judged raw, a recalibration fitted on them, `groups` more scored."""
    fair = groups_of(8, groups, seed=10 * seed + 2)
    judge = InstructionJudge(quality, length_bonus=bias, margin=0.05)
    scorer = GenRMScorer(judge, GenRMConfig(history=4096))
    rewards = lambda p, a: [r.reward for r in scorer.score_group(p, a).results]  # noqa: E731
    before, _ = length_correlation(rewards, fair)
    pooled = LengthCalibrator()
    pooled.fit([LengthRecord(r.score, r.len_a, r.len_b) for r in scorer.history])  # no groups: one pooled fit
    raw = GenRMScorer(judge)  # uncorrected verdicts for the old map
    after = groups_of(8, groups, seed=10 * seed + 3)
    old, _ = length_correlation(lambda p, a: per_verdict_rewards(raw, pooled, p, a), after)
    fit = scorer.recalibrate()
    new, read = length_correlation(rewards, after)
    second = scorer.recalibrate()  # a stage more, fitted on the verdicts as the first one corrected them
    again, _ = length_correlation(rewards, groups_of(8, groups, seed=10 * seed + 4))
    return {"before": before, "b1 pooled": pooled.coefficient_before, "old after": old,
            "b1 within": fit.before, "new after": new, "groups read": read,
            "b1 left": second.before, "after 2nd": again}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["throughput", "calls", "calibration"])
    parser.add_argument("--groups", type=int, default=200, help="groups per size / per bias")
    parser.add_argument("--seeds", type=int, default=3, help="calibration: streams per bias")
    args = parser.parse_args()
    if "throughput" in args.parts:
        print(f"throughput, {args.groups} groups per size\n")
        print("| G | judgements/s via scorer | rewards/s via scorer | judgements/s judge direct | ratio | calls |")
        print("|---|---|---|---|---|---|")
        for size in SIZES:
            via, rewards, direct, n = throughput(size, args.groups)
            print(f"| {size} | {via:.0f} | {rewards:.0f} | {direct:.0f} | {via / direct:.2f} | {n} |")
    if "calls" in args.parts:
        print(f"\njudge calls per group, {args.groups} groups per size\n")
        print("| G | Swiss rounds + vs reference | full round robin | ratio | reference is a best answer |")
        print("|---|---|---|---|---|")
        for size in SIZES:
            swiss, robin, best = calls(size, args.groups)
            print(f"| {size} | {swiss:.1f} | {robin:.1f} | {swiss / robin:.2f} | {best:.2f} |")
    if "calibration" in args.parts:
        print(f"\nwithin-group rank correlation of reward and length, G=8, {args.groups} groups each side, "
              f"{args.seeds} seeds (mean, then min..max)\n")
        print("| length bonus/char | before | b1 pooled | old map after | b1 fitted | new after | groups read | "
              "b1 left | after a 2nd recalibration |")
        print("|---|---|---|---|---|---|---|---|---|")
        for bias in BIASES:
            rows = [calibration(bias, args.groups, seed) for seed in range(args.seeds)]
            cells = []
            for name in ("before", "b1 pooled", "old after", "b1 within", "new after", "groups read", "b1 left",
                         "after 2nd"):
                values = [row[name] for row in rows]
                cells.append(f"{np.mean(values):+.2f} ({min(values):+.2f}..{max(values):+.2f})"
                             if "after" in name or name == "before" else f"{np.mean(values):.0f}"
                             if name == "groups read" else f"{np.mean(values):.2f}")
            print(f"| {bias} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
