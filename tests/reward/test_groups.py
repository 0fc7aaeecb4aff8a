"""Group scoring: format reward, soft overlong penalty, advantages, dynamic sampling, flags."""
from __future__ import annotations

import math

from m1flow.bus import Record, codec
from m1flow.contracts import events
from svc_reward.config import RewardConfig
from svc_reward.groups import GroupBuffer, score_group
from svc_reward.scorers import ScorerRegistry
from svc_reward.shaping import group_advantages, is_degenerate, overlong_penalty


def rollout(group: str, i: int, size: int, text: str, tokens: int = 2,
            finish=events.FINISH_REASON_STOP) -> events.Rollout:
    return events.Rollout(header=codec.header("t"), rollout_id=f"{group}/{i}", group_id=group, index=i,
                          group_size=size, response_text=text, token_ids=list(range(tokens)),
                          logprobs=[-0.1] * tokens, finish_reason=finish, max_new_tokens=8,
                          verifier=events.VerifierSpec(kind="arith", gold="5"))


def rec(offset: int) -> Record:
    return Record("rollouts", 0, offset, b"g", b"", 0)


def test_overlong_penalty_is_soft_then_full():
    assert overlong_penalty(6, 8, 2) == 0.0
    assert overlong_penalty(7, 8, 2) == -0.5
    assert overlong_penalty(8, 8, 2) == -1.0
    assert overlong_penalty(9, 8, 0) == -1.0


def test_advantages_are_group_normalised_and_skip_unusable():
    adv = group_advantages([1.0, 0.0, 1.0, 0.0, 7.0], usable=[True, True, True, True, False])
    assert math.isclose(sum(adv[:4]), 0.0, abs_tol=1e-9) and adv[4] == 0.0
    assert all(math.isclose(abs(a), 1.0, rel_tol=1e-4) for a in adv[:4])
    assert is_degenerate([0.1, 0.1, 0.1]) and not is_degenerate([0.1, 1.1])


def test_score_group_adds_parts_and_flags_dropped_groups():
    buffer = GroupBuffer()
    cfg = RewardConfig()
    registry = ScorerRegistry()
    for i, text in enumerate(["5", "4", "five", "5"]):
        group, new = buffer.add(rollout("g", i, 4, text, tokens=8 if i == 3 else 2), rec(i))
        assert new
    scored = score_group(group, registry, cfg)
    rewards = [round(s.reward, 3) for s in scored.samples]
    # correct+format; format only; format error (0); correct+format-overlong(8 of 8 tokens)
    assert rewards == [1.1, 0.1, 0.0, 0.1]
    assert scored.samples[2].status == "format_error" and not scored.dropped
    assert scored.source_offsets == [f"rollouts/0@{i}" for i in range(4)]
    assert buffer.add(rollout("g", 0, 4, "5"), rec(9)) == (None, False)  # late duplicate

    same = GroupBuffer()
    for i in range(2):
        group, _ = same.add(rollout("h", i, 2, "4"), rec(i))
    assert score_group(group, registry, cfg).dropped


def test_timed_out_group_is_scored_incomplete():
    buffer = GroupBuffer()
    buffer.add(rollout("t", 0, 3, "5"), rec(0))
    buffer.add(rollout("t", 1, 3, "4"), rec(1))
    (group,) = buffer.expired(timeout_s=-1)
    scored = score_group(group, ScorerRegistry(), RewardConfig())
    assert scored.incomplete and len(scored.samples) == 2 and scored.group_size == 3


class RecordingContext:
    """Stands in for the bus Context: records what the handler emits and releases."""

    def __init__(self) -> None:
        self.emitted: list[events.ScoredGroup] = []
        self.released: list[Record] = []

    def hold(self, record: Record) -> None:
        pass

    def emit(self, topic, key, message) -> None:  # noqa: ANN001
        self.emitted.append(message)

    def release(self, records: list[Record]) -> None:
        self.released += records


def test_a_slow_verifier_does_not_stall_other_groups():
    import threading
    import time

    from svc_reward.result import ScoreResult
    from svc_reward.service import GroupHandler

    gate = threading.Event()
    registry = ScorerRegistry()
    registry.register("slow", lambda response, spec: (gate.wait(30), ScoreResult.scored(True))[1])
    handler = GroupHandler(registry, RewardConfig(scoring_threads=2))
    ctx = RecordingContext()
    slow = rollout("slow", 0, 1, "5")
    slow.verifier.kind = "slow"
    handler.handle(slow, rec(0), ctx)
    handler.handle(rollout("fast", 0, 1, "5"), rec(1), ctx)
    deadline = time.monotonic() + 10
    while not ctx.emitted and time.monotonic() < deadline:
        handler.tick(ctx)
        time.sleep(0.05)
    assert [g.group_id for g in ctx.emitted] == ["fast"]  # scored while the slow one still runs
    assert ctx.released == [rec(1)]  # and only its record may be committed
    gate.set()
    handler.drain(ctx)
    assert [g.group_id for g in ctx.emitted] == ["fast", "slow"]
