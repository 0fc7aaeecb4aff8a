"""Group scoring: verdicts per sample and per group, and nothing of the algorithm (no shaping,
advantages or dynamic sampling: those are the learner's, m1flow.rl)."""
from __future__ import annotations

from m1flow.bus import Record, codec
from m1flow.contracts import events
from m1flow.status import Status
from svc_reward.config import RewardConfig
from svc_reward.groups import GroupBuffer, score_group
from svc_reward.scorers import ScorerRegistry


def rollout(group: str, i: int, size: int, text: str, tokens: int = 2,
            finish=events.FINISH_REASON_STOP) -> events.Rollout:
    return events.Rollout(header=codec.header("t"), rollout_id=f"{group}/{i}", group_id=group, index=i,
                          group_size=size, response_text=text, token_ids=list(range(tokens)),
                          logprobs=[-0.1] * tokens, finish_reason=finish, max_new_tokens=8,
                          verifier=events.VerifierSpec(kind="arith", gold="5"))


def rec(offset: int) -> Record:
    return Record("rollouts", 0, offset, b"g", b"", 0)


def test_score_group_writes_verdicts_and_the_samples_unshaped():
    buffer = GroupBuffer()
    registry = ScorerRegistry()
    for i, text in enumerate(["5", "4", "five", "5"]):
        group, new = buffer.add(rollout("g", i, 4, text, tokens=8 if i == 3 else 2), rec(i))
        assert new
    scored = score_group(group, registry)
    # the verifier's rewards as they are: no format reward, no overlong penalty (8 of 8 tokens)
    assert [s.reward for s in scored.samples] == [1.0, 0.0, 0.0, 1.0]
    assert [s.status for s in scored.samples] == [Status.OK, Status.OK, Status.FORMAT_ERROR, Status.OK]
    assert [s.parts.correctness for s in scored.samples] == [1.0, 0.0, 0.0, 1.0]
    assert all(s.parts.format == 0 and s.parts.length_penalty == 0 for s in scored.samples)
    assert [s.max_new_tokens for s in scored.samples] == [8] * 4  # the window, for the learner's shaping
    assert not scored.incomplete and scored.group_size == 4 and scored.header.schema_version == 2
    assert scored.verifier_kind == "arith"  # the monitor's accuracy per verifier kind
    assert scored.source_offsets == [f"rollouts/0@{i}" for i in range(4)]
    assert buffer.add(rollout("g", 0, 4, "5"), rec(9)) == (None, False)  # late duplicate

    same = GroupBuffer()
    for i in range(2):
        group, _ = same.add(rollout("h", i, 2, "4"), rec(i))
    assert [s.reward for s in score_group(group, registry).samples] == [0.0, 0.0]  # written, not dropped


def test_an_infrastructure_failure_is_marked_by_the_enum():
    buffer = GroupBuffer()
    for i in range(2):
        r = rollout("x", i, 2, "5")
        r.verifier.kind = "nosuch"
        group, _ = buffer.add(r, rec(i))
    scored = score_group(group, ScorerRegistry())
    assert [s.status for s in scored.samples] == [Status.JUDGE_ERROR] * 2
    assert all(Status(s.status).is_infra_failure and not s.HasField("correct") for s in scored.samples)


def test_timed_out_group_is_scored_incomplete():
    buffer = GroupBuffer()
    buffer.add(rollout("t", 0, 3, "5"), rec(0))
    buffer.add(rollout("t", 1, 3, "4"), rec(1))
    (group,) = buffer.expired(timeout_s=-1)
    scored = score_group(group, ScorerRegistry())
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


def test_the_score_rpc_answers_with_the_status_enum():
    from m1flow.contracts import rpc
    from svc_reward.service import RewardGrpc

    spec = events.VerifierSpec(kind="arith", gold="5")
    ok = RewardGrpc(ScorerRegistry()).Score(rpc.ScoreRequest(response="5", verifier=spec), None)
    assert (ok.reward, ok.correct, ok.status, ok.parts.correctness) == (1.0, True, Status.OK, 1.0)
    bad = RewardGrpc(ScorerRegistry()).Score(rpc.ScoreRequest(response="five", verifier=spec), None)
    assert bad.status == Status.FORMAT_ERROR and bad.HasField("correct") and not bad.correct


def test_the_scored_group_carries_the_prompts_source_and_domain():
    buffer = GroupBuffer()
    for i in range(2):
        r = rollout("s", i, 2, "5")
        r.task_type, r.source, r.domain = "math", "gsm8k", "reasoning"
        group, _ = buffer.add(r, rec(i))
    scored = score_group(group, ScorerRegistry())
    assert (scored.source, scored.domain, scored.task_type) == ("gsm8k", "reasoning", "math")

    older = GroupBuffer()  # rollouts of a producer from before the fields: the task type is the source
    for i in range(2):
        r = rollout("o", i, 2, "5")
        r.task_type = "arith"
        group, _ = older.add(r, rec(i))
    scored = score_group(group, ScorerRegistry())
    assert (scored.source, scored.domain) == ("arith", "")


def test_a_group_is_emitted_in_the_loop_turn_it_finishes_in():
    """The service's loop polls Kafka without waiting while groups score, and the tick waits on them
    instead: a group finished during a turn is emitted in it, not one poll (up to 200 ms, with no
    rollouts arriving) later, which the learner waited on every version (bench/learning.py)."""
    import threading
    import time

    from svc_reward.result import ScoreResult
    from svc_reward.service import GroupHandler

    registry = ScorerRegistry()
    registry.register("takes_a_while", lambda response, spec: (time.sleep(0.2), ScoreResult.scored(True))[1])
    gate = threading.Event()
    registry.register("gated", lambda response, spec: (gate.wait(30), ScoreResult.scored(True))[1])

    def one_tick(kind: str, wait_ms: int) -> tuple[GroupHandler, RecordingContext, float]:
        """A one-rollout group of `kind` handed over, then one tick: the handler, what it emitted, how long."""
        handler = GroupHandler(registry, RewardConfig(scoring_threads=2, scoring_wait_ms=wait_ms))
        ctx = RecordingContext()
        r = rollout(kind, 0, 1, "5")
        r.verifier.kind = kind
        handler.handle(r, rec(0), ctx)
        started = time.monotonic()
        handler.tick(ctx)
        return handler, ctx, time.monotonic() - started

    _, ctx, took = one_tick("takes_a_while", wait_ms=10_000)
    assert [g.group_id for g in ctx.emitted] == ["takes_a_while"] and ctx.released == [rec(0)]
    assert took < 5  # it waited for the group, not for the whole wait

    handler, ctx, took = one_tick("gated", wait_ms=50)  # still scoring: the turn ends after the wait, the loop reads on
    assert ctx.emitted == [] and took < 5
    gate.set()
    handler.drain(ctx)
    assert [g.group_id for g in ctx.emitted] == ["gated"]
