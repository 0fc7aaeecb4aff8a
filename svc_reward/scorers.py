"""Which verifier scores a sample, chosen by the prompt's verifier kind.

Most kinds score one response at a time (`Scorer`). GenRM is different: it ranks a whole group
(a Swiss tournament picks the reference, then every rollout is judged against it), so it is a
`GroupScorer`; `ScorerRegistry.score_group` routes a group either way and the caller shapes and
normalises the results the same for every kind. Verifiers are imported lazily: a reward replica
that only sees arithmetic never starts a math worker pool, and one without a sandbox address
still scores everything that needs none.
"""
from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from m1flow.contracts import events
from m1flow.task_store import read_payload
from svc_reward.config import RewardConfig
from svc_reward.result import ScoreResult, Status
from svc_reward.verifiers.code import CodeRewardConfig
from svc_reward.verifiers.math import MathVerifyConfig

if TYPE_CHECKING:
    from svc_reward.genrm import GenRMScorer, Judge, LengthCoefficients
    from svc_reward.verifiers.math import MathVerifierPool
    from svc_sandbox.client import SandboxClient

log = logging.getLogger(__name__)
Scorer = Callable[[str, events.VerifierSpec], ScoreResult]
GroupScorer = Callable[[str, Sequence[str], events.VerifierSpec], list[ScoreResult]]


def _arith(response: str, spec: events.VerifierSpec) -> ScoreResult:
    from svc_reward.verifiers.arith import verify_arith

    return verify_arith(response, spec.gold)


class MathKind:
    """math-verify in this replica's worker pool, started on the first math task."""

    def __init__(self, config: MathVerifyConfig) -> None:
        self.config = config
        self._pool: MathVerifierPool | None = None
        self._lock = threading.Lock()

    def __call__(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        with self._lock:
            if self._pool is None:
                from svc_reward.verifiers.math import MathVerifierPool

                self._pool = MathVerifierPool(self.config)
        return self._pool.verify(response, spec.gold)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


def _logic(response: str, spec: events.VerifierSpec) -> ScoreResult:
    from svc_reward.verifiers.logic import score_logic

    return score_logic(response, spec)


def _rg(response: str, spec: events.VerifierSpec) -> ScoreResult:
    from svc_reward.verifiers.rg import score_rg

    return score_rg(response, spec)


def code_scorer(sandbox: SandboxClient, config: CodeRewardConfig) -> Scorer:
    """Tests run in svc_sandbox over gRPC. spec_json: {"tests": [...], "language": ...} (stdin/stdout),
    or {"style": "function", "test": ..., "entry_point": ..., "prompt": ...} (HumanEval style)."""
    from svc_reward.verifiers.code import CodeVerifier, FunctionTest, TestCase

    verifier = CodeVerifier(sandbox, config)

    def score(response: str, spec: events.VerifierSpec) -> ScoreResult:
        data = json.loads(spec.spec_json)
        if data.get("style") == "function":
            return verifier.verify_function(response, FunctionTest.model_validate(data))
        tests = [TestCase.model_validate(t) for t in data["tests"]]
        return verifier.verify(response, tests, data.get("language", "python"))

    return score


def swe_scorer(sandbox: SandboxClient) -> Scorer:
    """The patch in the answer, applied and tested by svc_sandbox's RunTests, graded here.

    The repository snapshot (svc_sandbox.swe.snapshot_tar) is the spec's payload_uri in the task
    store (m1flow.source.swe_verifier_spec writes it), or, in prompts written before the store,
    base64 in spec_json's "repo_tar". spec_json: {"fail_to_pass": [...], "pass_to_pass": [...],
    "test_command": "...", "limits": {...}}; all but fail_to_pass optional.
    """
    from svc_reward.verifiers.swe import SweTask, SweVerifier

    verifier = SweVerifier(sandbox.run_tests)

    def score(response: str, spec: events.VerifierSpec) -> ScoreResult:
        data = json.loads(spec.spec_json)
        repo_tar = read_payload(spec.payload_uri) if spec.payload_uri else base64.b64decode(data["repo_tar"])
        task = SweTask.model_validate({**data, "repo_tar": repo_tar})
        return verifier.verify(response, task)

    return score


def distinct_word_share(text: str) -> float:
    """Share of distinct words: the quality judge's hidden value, low for repetitive rambling."""
    words = text.lower().split()
    return len(set(words)) / len(words) if words else 0.0


def build_judge(cfg: RewardConfig) -> Judge | None:
    """The configured GenRM judge, or None when genrm tasks are not scored by this replica."""
    from svc_reward import genrm

    if cfg.genrm_judge == "length":
        return genrm.LengthLovingJudge(margin=cfg.genrm_margin)
    if cfg.genrm_judge == "quality":
        return genrm.QualityJudge(distinct_word_share, cfg.genrm_length_bonus, cfg.genrm_margin,
                                   cfg.genrm_bonus_after)
    if cfg.genrm_judge == "openai":
        return genrm.OpenAIJudge(cfg.genrm_openai)
    if cfg.genrm_judge == "native":
        from m1flow.checkpoint import load_policy

        checkpoint = cfg.genrm_checkpoint
        if not checkpoint:
            raise ValueError("genrm_judge=native needs genrm_checkpoint")
        model, tokenizer = load_policy(checkpoint)
        return genrm.NativeJudge(model, tokenizer, config=cfg.genrm_native)
    return None


class GenRMKind:
    """The `genrm` verifier kind: a group judged pairwise by one GenRM scorer, recalibrated on demand.

    The judge sees each response after its reasoning (the answer the user would read) and the
    rollout's prompt text. spec_json may hold {"candidates": [...]} to pick the reference among
    fixed answers instead of the group itself.
    """

    def __init__(self, scorer: GenRMScorer) -> None:
        self.scorer = scorer

    @classmethod
    def from_config(cls, cfg: RewardConfig) -> GenRMKind | None:
        from svc_reward.genrm import GenRMScorer

        judge = build_judge(cfg)
        return None if judge is None else cls(GenRMScorer(judge, cfg.genrm, cfg.genrm_calibration))

    def score_group(self, prompt: str, responses: Sequence[str], spec: events.VerifierSpec) -> list[ScoreResult]:
        from svc_reward.verifiers.extract import after_reasoning

        candidates = json.loads(spec.spec_json).get("candidates") if spec.spec_json else None
        answers = [after_reasoning(r) for r in responses]
        return self.scorer.score_group(prompt, answers, candidates).results

    def recalibrate(self) -> LengthCoefficients:
        """What a `control` recalibrate command runs (see GenRMScorer.recalibrate)."""
        return self.scorer.recalibrate()

    @property
    def flip_rate(self) -> float:
        return self.scorer.flip_rate


class ScorerRegistry:
    def __init__(self, sandbox_address: str = "", genrm: GenRMKind | None = None,
                 math: MathVerifyConfig | None = None, code: CodeRewardConfig | None = None) -> None:
        self.sandbox_address = sandbox_address
        self.genrm = genrm
        self.math = MathKind(math or MathVerifyConfig())
        self._scorers: dict[str, Scorer] = {"arith": _arith, "math": self.math, "logic": _logic,
                                              "rg": _rg}
        self._group_scorers: dict[str, GroupScorer] = {}
        if sandbox_address:
            from svc_sandbox.client import SandboxClient

            sandbox = SandboxClient(sandbox_address)
            self._scorers["code"] = code_scorer(sandbox, code or CodeRewardConfig())
            self._scorers["swe"] = swe_scorer(sandbox)
        if genrm is not None:
            self._group_scorers["genrm"] = genrm.score_group

    @classmethod
    def from_config(cls, cfg: RewardConfig) -> ScorerRegistry:
        return cls(cfg.sandbox_address, GenRMKind.from_config(cfg), cfg.math, cfg.code)

    def close(self) -> None:
        """Stop the worker processes this registry started."""
        self.math.close()

    def register(self, kind: str, scorer: Scorer) -> None:
        self._scorers[kind] = scorer

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        """Score one response; an unknown kind or a crashing verifier is a marked failure, not a 0."""
        kind = _kind(spec)
        scorer = self._scorers.get(kind)
        if scorer is None:
            why = "scores whole groups only" if kind in self._group_scorers else "has no verifier"
            return ScoreResult.failed(Status.JUDGE_ERROR, f"kind {spec.kind!r} {why}")
        try:
            return scorer(response, spec)
        except Exception as exc:  # noqa: BLE001 - infrastructure trouble must not become reward 0
            return ScoreResult.failed(Status.JUDGE_ERROR, f"verifier {kind} failed: {exc!r}")

    def score_group(self, prompt: str, responses: Sequence[str], spec: events.VerifierSpec) -> list[ScoreResult]:
        """One result per response, in order: by the kind's group scorer, else one by one."""
        scorer = self._group_scorers.get(_kind(spec))
        if scorer is None:
            return [self.score(r, spec) for r in responses]
        try:
            return scorer(prompt, responses, spec)
        except Exception as exc:  # noqa: BLE001 - same rule as `score`
            log.warning("group scorer %s failed: %r", spec.kind, exc)
            return [ScoreResult.failed(Status.JUDGE_ERROR, f"verifier {spec.kind} failed: {exc!r}")
                    for _ in responses]


def _kind(spec: events.VerifierSpec) -> str:
    return spec.kind.split(":", 1)[0]
