"""The `genrm` verifier kind: a group judged pairwise by one GenRM scorer, recalibrated on demand.

The judge sees each response after its reasoning (the answer the user would read) and the
rollout's prompt text. spec_json may hold {"candidates": [...]} to pick the reference among fixed
answers instead of the group itself.
"""
from __future__ import annotations

import json
from collections.abc import Sequence

from m1flow.chat import after_reasoning
from m1flow.contracts import events
from svc_reward.genrm.calibration import LengthCoefficients
from svc_reward.genrm.config import GenRMKindConfig
from m1flow.tasks.general import quality as instruction_quality
from svc_reward.genrm.heuristic import InstructionJudge, LengthLovingJudge, QualityJudge, distinct_word_share
from svc_reward.genrm.judge import Judge
from svc_reward.genrm.scorer import GenRMScorer
from svc_reward.kinds import SCORERS, KindContext
from svc_reward.result import ScoreResult, Status


def build_judge(cfg: GenRMKindConfig) -> Judge | None:
    """The configured GenRM judge, or None when genrm tasks are not scored by this replica."""
    if cfg.judge == "length":
        return LengthLovingJudge(margin=cfg.margin)
    if cfg.judge == "quality":
        return QualityJudge(distinct_word_share, cfg.length_bonus, cfg.margin, cfg.bonus_after)
    if cfg.judge == "general":
        return InstructionJudge(instruction_quality, cfg.length_bonus, cfg.margin, cfg.bonus_after)
    if cfg.judge == "openai":
        from svc_reward.genrm.openai_judge import OpenAIJudge

        return OpenAIJudge(cfg.openai)
    if cfg.judge == "native":
        from m1flow.checkpoint import load_policy

        from svc_reward.genrm.native_judge import NativeJudge

        if not cfg.checkpoint:
            raise ValueError("genrm.judge=native needs genrm.checkpoint")
        model, tokenizer = load_policy(cfg.checkpoint)
        return NativeJudge(model, tokenizer, config=cfg.native)
    return None


class GenRMKind:
    def __init__(self, scorer: GenRMScorer) -> None:
        self.scorer = scorer

    @classmethod
    def from_config(cls, cfg: GenRMKindConfig) -> GenRMKind | None:
        judge = build_judge(cfg)
        return None if judge is None else cls(GenRMScorer(judge, cfg, cfg.calibration))

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        return ScoreResult.failed(Status.JUDGE_ERROR, f"kind {spec.kind!r} scores whole groups only")

    def score_group(self, prompt: str, responses: Sequence[str], spec: events.VerifierSpec) -> list[ScoreResult]:
        candidates = json.loads(spec.spec_json).get("candidates") if spec.spec_json else None
        answers = [after_reasoning(r) for r in responses]
        return self.scorer.score_group(prompt, answers, candidates).results

    def recalibrate(self) -> LengthCoefficients:
        """What a `control` recalibrate command runs (see GenRMScorer.recalibrate)."""
        return self.scorer.recalibrate()

    @property
    def flip_rate(self) -> float:
        return self.scorer.flip_rate


@SCORERS.register("genrm")
def genrm_kind(ctx: KindContext) -> GenRMKind:
    kind = GenRMKind.from_config(ctx.config.genrm)
    if kind is None:
        raise ValueError("no GenRM judge configured (genrm.judge is empty)")
    return kind
