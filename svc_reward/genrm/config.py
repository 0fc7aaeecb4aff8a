"""Typed settings of the GenRM reward; every default works on a small CPU machine."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class OpenAIJudgeConfig(BaseModel):
    """An OpenAI-compatible chat-completions endpoint, e.g. `vllm serve` of a judge model."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "judge"
    api_key: str | None = None
    temperature: float = Field(0.0, ge=0.0)
    max_tokens: int = Field(1024, gt=0)
    timeout_s: float = Field(60.0, gt=0.0)
    retries: int = Field(3, ge=0, description="extra attempts after a transport failure")
    backoff_s: float = Field(0.5, ge=0.0, description="first wait between attempts; doubles each time")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="more request fields, as the server names them, e.g. vLLM's structured outputs that hold a "
                    "judge model to the verdict marks: {structured_outputs: {choice: ['[[A]]', '[[B]]', '[[TIE]]']}}")


class NativeJudgeConfig(BaseModel):
    """The project's own engine used as judge."""

    max_new_tokens: int = Field(256, gt=0)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)


class GenRMConfig(BaseModel):
    """How answers are compared, references chosen and rollouts scored."""

    repeats: int = Field(1, ge=1, description="blind judgements per order for each pair")
    rounds: int | None = Field(None, ge=1, description="Swiss rounds; None means ceil(log2 N)")
    concurrency: int = Field(1, ge=1, description="pairs judged at once (helps HTTP judges)")
    max_error_rate: float = Field(
        0.5, ge=0.0, le=1.0,
        description="share of failed tournament matches above which no reference is trusted")
    history: int = Field(4096, ge=1, description="recent raw verdicts kept for recalibration")


class CalibrationConfig(BaseModel):
    """The length-controlled logistic fit."""

    l2: float = Field(1e-3, ge=0.0, description="ridge penalty; keeps a perfect length lover finite")
    min_records: int = Field(20, ge=2)
    min_pairs: int = Field(
        10, ge=1, description="discordant within-group pairs (one verdict won, the other did not) at least, to fit "
                              "b1 within groups; fewer falls back to the pooled fit, which the groups' different "
                              "references attenuate")
    min_coefficient: float = Field(
        0.5, ge=0.0, description="length coefficient b1 at or below which a fit corrects nothing (the judge "
                                 "has no length preference worth removing; the monitor's coef_threshold)")
    max_stages: int = Field(
        4, ge=1, description="correction stages at most: a recalibration after the first adds a stage fitted on "
                             "the verdicts as the stages before it corrected them; past this many it refits on raw "
                             "verdicts")
    max_iter: int = Field(50, ge=1)


JudgeBackend = Literal["", "openai", "native", "length", "quality", "general"]


class GenRMKindConfig(GenRMConfig):
    """The reward service's `genrm:` block: the judge, and how its verdicts become rewards.

    It holds the pairwise and Swiss settings of `GenRMConfig` as its own keys (`genrm: {repeats: 2}`),
    plus the judge backend and each backend's settings, and the length calibration.
    """

    judge: JudgeBackend = Field(
        "", description="openai (an HTTP endpoint), native (a checkpoint), or the heuristic judges for tests "
                        "and CPU demos: length, quality (distinct-word share), general (the hidden quality of "
                        "m1flow.tasks.general's instructions); empty: genrm tasks are not scored")
    openai: OpenAIJudgeConfig = Field(default_factory=OpenAIJudgeConfig,
                                      description="endpoint of the openai judge (base_url, model, ...)")
    checkpoint: str = Field("", description="policy directory (or file:// URI) of the native judge")
    native: NativeJudgeConfig = Field(default_factory=NativeJudgeConfig, description="native judge sampling")
    margin: float = Field(0.0, ge=0.0, description="heuristic judges: value gap below which answers tie")
    length_bonus: float = Field(0.0, description="quality/general judge: value added per character of answer")
    bonus_after: int = Field(0, ge=0, description="quality/general judge: the length bonus starts after this many "
                                                  "judgements (a judge that drifts mid-run, for tests)")
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig,
                                           description="length-controlled recalibration fit")


# The flat keys the reward service had before the block (issue 18); RewardConfig still reads them.
FLAT_KEYS = {f"genrm_{name}": name for name in (
    "judge", "openai", "checkpoint", "native", "margin", "length_bonus", "bonus_after", "calibration")}
