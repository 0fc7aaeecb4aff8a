"""Reward shaping: what the learner adds to the verifier's reward before estimating advantages.

* format reward: a small bonus for an answer in the expected form (status OK).
* DAPO's soft overlong penalty: 0 up to window - buffer tokens, then linear down to -1 at the
  window. A response cut by the window (finish reason LENGTH) that has no answer at all gets the
  full -1; one that has an answer keeps the soft value.

Infrastructure failures are never shaped: selection leaves them out.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from m1flow.contracts import events
from m1flow.status import Status


class ShapingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_reward: float = Field(0.1, description="added to a well-formed answer's reward (status OK)")
    overlong_penalty: bool = Field(True, description="DAPO's soft overlong penalty")
    overlong_buffer_frac: float = Field(0.25, ge=0.0, le=1.0,
                                        description="the penalty's ramp, as a fraction of the output window")


def overlong_penalty(length: int, max_len: int, buffer: int) -> float:
    """0 up to max_len - buffer, then linear down to -1 at max_len (and beyond)."""
    if buffer <= 0 or length <= max_len - buffer:
        return 0.0 if length <= max_len else -1.0
    return max(-1.0, (max_len - buffer - length) / buffer)


def length_penalty(sample: events.ScoredSample, status: Status, cfg: ShapingConfig) -> float:
    """The overlong penalty of one sample; 0 when its window is unknown (max_new_tokens unset)."""
    if not cfg.overlong_penalty:
        return 0.0
    if sample.finish_reason == events.FINISH_REASON_LENGTH and status is Status.FORMAT_ERROR:
        return -1.0
    window = sample.max_new_tokens
    if not window:
        return 0.0
    return overlong_penalty(len(sample.token_ids), window, int(window * cfg.overlong_buffer_frac))


def shaped_reward(sample: events.ScoredSample, status: Status, cfg: ShapingConfig) -> float:
    """The verifier's reward plus the format reward and the overlong penalty."""
    fmt = cfg.format_reward if status is Status.OK else 0.0
    return sample.reward + fmt + length_penalty(sample, status, cfg)
