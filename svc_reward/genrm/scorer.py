"""GenRM rewards for open-ended answers: pick a reference by Swiss rounds, score rollouts against it.

Each rollout's reward is its position-switched pairwise score against the reference, in [-1, 1],
length-corrected once `recalibrate()` has fitted a `LengthCalibrator`. Raw verdicts with their lengths are
kept in a bounded history so a recalibration can be fitted on recent traffic. A judge failure is
Status.JUDGE_ERROR (the learner drops the sample), never a reward.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from svc_reward.result import RewardParts, ScoreResult, Status

from .calibration import LengthCalibrator, LengthCoefficients, LengthRecord, text_key
from .config import CalibrationConfig, GenRMConfig
from .judge import Judge, JudgeError
from .pairwise import Comparer, Comparison, FlipTracker
from .swiss import TournamentResult, swiss_tournament


@dataclass(frozen=True)
class GroupScore:
    results: list[ScoreResult]  # one per rollout, in order
    reference: str | None  # None when no reference could be trusted
    tournament: TournamentResult | None


class GenRMScorer:
    def __init__(self, judge: Judge, config: GenRMConfig | None = None,
                 calibration: CalibrationConfig | None = None,
                 length: Callable[[str], int] = len) -> None:
        self.judge = judge
        self.config = config or GenRMConfig()
        self.calibration = calibration
        self.calibrator: LengthCalibrator | None = None  # set by recalibrate()
        self.length = length
        self.tracker = FlipTracker()
        self.history: deque[LengthRecord] = deque(maxlen=self.config.history)
        self.games: deque[LengthRecord] = deque(maxlen=self.config.history)  # Swiss games between peers
        self.since_fit: deque[LengthRecord] = deque(maxlen=self.config.history)  # as the current fit scored them

    @property
    def flip_rate(self) -> float:
        return self.tracker.rate

    def comparer(self) -> Comparer:
        """A comparer sharing this scorer's flip count; its cache lives as long as it does."""
        return Comparer(self.judge, self.config.repeats, self.tracker)

    def pick_reference(self, prompt: str, candidates: Sequence[str],
                       comparer: Comparer | None = None) -> TournamentResult:
        return swiss_tournament(prompt, candidates, comparer or self.comparer(),
                                self.config.rounds, self.config.concurrency)

    def score_against(self, prompt: str, rollouts: Sequence[str], reference: str,
                      comparer: Comparer | None = None) -> list[ScoreResult]:
        """Each rollout's pairwise score against `reference`, the group length-corrected as a whole."""
        comparer = comparer or self.comparer()
        outcomes = comparer.compare_many(prompt, [(r, reference) for r in rollouts],
                                         self.config.concurrency)
        judged = [i for i, o in enumerate(outcomes) if isinstance(o, Comparison)]
        raw = [outcomes[i].score for i in judged]
        lengths, ref_length = [self.length(rollouts[i]) for i in judged], self.length(reference)
        group = text_key(prompt, reference)
        calibrator = self.calibrator  # read once: a recalibration meanwhile applies to the next group
        scores = raw if calibrator is None else calibrator.correct_group(
            raw, lengths, ref_length, [text_key(group, rollouts[i]) for i in judged],
            [rollouts[i] == reference for i in judged])
        for i, score, paid, length in zip(judged, raw, scores, lengths):
            if rollouts[i] != reference:
                self.history.append(LengthRecord(score, length, ref_length, group))
                if calibrator is self.calibrator:
                    self.since_fit.append(LengthRecord(paid, length, ref_length, group))
        corrected = dict(zip(judged, scores))
        return [self._result(o, corrected.get(i, 0.0)) for i, o in enumerate(outcomes)]

    def score_group(self, prompt: str, rollouts: Sequence[str],
                    candidates: Sequence[str] | None = None) -> GroupScore:
        """Pick the reference among `candidates` (default: the rollouts) and score every rollout."""
        candidates = list(candidates) if candidates is not None else list(rollouts)
        if not candidates:
            raise ValueError("no candidate answers to pick a reference from")
        comparer = self.comparer()  # shared, so tournament games against the reference are reused
        tournament = self.pick_reference(prompt, candidates, comparer)
        if tournament.error_rate > self.config.max_error_rate:
            detail = f"judge failed {tournament.error_rate:.0%} of reference matches"
            return GroupScore([ScoreResult.failed(Status.JUDGE_ERROR, detail) for _ in rollouts],
                              None, tournament)
        reference = candidates[tournament.winner]
        for (a, b), game in tournament.comparisons.items():  # the length preference between peers
            self.games.append(LengthRecord(game.score, self.length(candidates[a]), self.length(candidates[b])))
        return GroupScore(self.score_against(prompt, rollouts, reference, comparer),
                          reference, tournament)

    def recalibrate(self) -> LengthCoefficients:
        """Fit a length correction; verdicts from now on are corrected by it.

        The first fit (and one after `max_stages` stages) is on the recent raw verdicts; a later one adds a
        stage fitted on the verdicts as the current correction scored them since it was fitted, so what a
        correction left (or over-did) is removed on traffic it did not see (`LengthCalibrator.extended`).
        The fit runs on a new calibrator that then replaces the old one in one assignment, so a group
        scored meanwhile on another thread sees the old correction or the new, never a mix.
        Raises ValueError when recent verdicts cannot support a fit (too few, or all equal).
        """
        current = self.calibrator
        limit = (self.calibration or CalibrationConfig()).max_stages
        if current is not None and current.fitted and len(current.stages) < limit:
            fitted = current.extended(tuple(self.since_fit))
        else:
            fitted = LengthCalibrator(self.calibration)
            fitted.fit(tuple(self.history) + tuple(self.games))
        self.calibrator = fitted
        self.since_fit.clear()
        return fitted.coefficients()

    def _result(self, outcome: Comparison | JudgeError, score: float) -> ScoreResult:
        if isinstance(outcome, JudgeError):
            return ScoreResult.failed(Status.JUDGE_ERROR, f"judge: {outcome}")
        detail = (f"vs reference: s_AB={[int(v) for v in outcome.ab]} "
                  f"s_BA={[int(v) for v in outcome.ba]} raw={outcome.score:+.3f} flips={outcome.flips}")
        return ScoreResult(reward=score, correct=None, status=Status.OK,
                           parts=RewardParts(genrm=score), detail=detail)
