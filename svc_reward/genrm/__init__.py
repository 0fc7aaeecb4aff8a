"""Pairwise generative reward model: judges, position-switched comparison, Swiss-round references
and length-controlled recalibration. Usable without Kafka."""
from .calibration import LengthCalibrator, LengthCoefficients, LengthRecord
from .config import CalibrationConfig, GenRMConfig, GenRMKindConfig, NativeJudgeConfig, OpenAIJudgeConfig
from .heuristic import InstructionJudge, LengthLovingJudge, PositionBiasedJudge, QualityJudge, distinct_word_share
from .judge import ChatJudge, Judge, JudgeError
from .native_judge import NativeJudge
from .openai_judge import OpenAIJudge
from .pairwise import Comparer, Comparison, FlipTracker
from .prompts import Verdict, VerdictParseError, parse_verdict, render
from .scorer import GenRMScorer, GroupScore
from .swiss import Match, Standing, TournamentResult, run_swiss, swiss_rounds, swiss_tournament

__all__ = [
    "CalibrationConfig", "ChatJudge", "Comparer", "Comparison", "FlipTracker", "GenRMConfig",
    "GenRMKindConfig", "GenRMScorer", "GroupScore", "InstructionJudge", "Judge", "JudgeError", "LengthCalibrator",
    "LengthCoefficients",
    "LengthLovingJudge", "LengthRecord", "Match", "NativeJudge", "NativeJudgeConfig", "OpenAIJudge",
    "OpenAIJudgeConfig", "PositionBiasedJudge", "QualityJudge", "Standing", "TournamentResult",
    "Verdict", "VerdictParseError", "parse_verdict", "render", "run_swiss", "swiss_rounds",
    "swiss_tournament", "distinct_word_share",
]
