"""Collect the G rollouts of a group, and turn a complete group into one ScoredGroup.

A ScoredGroup holds what the verifiers said (reward, parts, verdict, status) per sample, and the
samples themselves; advantages, shaping and the choice of what to train on are the learner's
(m1flow.rl). It carries the prompt's source and domain (from its rollouts; a rollout from a producer
older than those fields: its task type as the source) for per-source accounting.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from m1flow.accounting import source_of
from m1flow.bus import Record, codec
from m1flow.bus.dedupe import SeenIds
from m1flow.bus.limits import oversize
from m1flow.contracts import events
from svc_reward.result import ScoreResult
from svc_reward.scorers import ScorerRegistry

log = logging.getLogger(__name__)


@dataclass
class PendingGroup:
    group_id: str
    group_size: int
    first_seen: float
    rollouts: dict[int, events.Rollout] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.rollouts) >= self.group_size

    @property
    def partitions(self) -> set[tuple[str, int]]:
        return {(r.topic, r.partition) for r in self.records}


class GroupBuffer:
    """Groups waiting for their rollouts. Duplicate and late rollouts are recognised, not re-scored."""

    def __init__(self) -> None:
        self.pending: dict[str, PendingGroup] = {}
        self.finished = SeenIds()

    def add(self, rollout: events.Rollout, record: Record) -> tuple[PendingGroup | None, bool]:
        """(the group if this rollout completed it, whether the rollout is new)."""
        if rollout.group_id in self.finished:
            return None, False
        group = self.pending.get(rollout.group_id)
        if group is None:
            group = self.pending[rollout.group_id] = PendingGroup(
                rollout.group_id, max(1, rollout.group_size), time.monotonic())
        group.records.append(record)
        if rollout.index in group.rollouts:
            return None, False
        group.rollouts[rollout.index] = rollout
        return (self.pop(rollout.group_id) if group.complete else None), True

    def pop(self, group_id: str) -> PendingGroup:
        self.finished.seen(group_id)
        return self.pending.pop(group_id)

    def expired(self, timeout_s: float) -> list[PendingGroup]:
        now = time.monotonic()
        return [self.pop(gid) for gid, g in list(self.pending.items()) if now - g.first_seen > timeout_s]

    def drop_partitions(self, partitions: set[tuple[str, int]]) -> None:
        """Forget groups on partitions handed to another replica; it re-reads their rollouts."""
        for gid, group in list(self.pending.items()):
            if group.partitions & partitions:
                del self.pending[gid]


def score_group(group: PendingGroup, registry: ScorerRegistry) -> events.ScoredGroup:
    """Verdicts for the whole group at once (GenRM compares the rollouts with each other)."""
    rollouts = [group.rollouts[i] for i in sorted(group.rollouts)]
    first = rollouts[0]
    verdicts = registry.score_group(first.prompt_text, [r.response_text for r in rollouts], first.verifier)
    scored = events.ScoredGroup(
        header=codec.header("reward", run_id=first.header.trace.run_id, group_id=group.group_id,
                            policy_version=first.policy_version, message_id=f"scored:{group.group_id}"),
        group_id=group.group_id, prompt_id=first.prompt_id, task_type=first.task_type,
        verifier_kind=first.verifier.kind, source=source_of(first), domain=first.domain,
        incomplete=not group.complete, group_size=group.group_size,
        source_offsets=sorted({rec.position for rec in group.records}))
    for rollout, res in zip(rollouts, verdicts):
        scored.samples.add(
            rollout_id=rollout.rollout_id, index=rollout.index, **verdict_fields(res),
            policy_version=rollout.policy_version, prompt_token_ids=rollout.prompt_token_ids,
            token_ids=rollout.token_ids, logprobs=rollout.logprobs, finish_reason=rollout.finish_reason,
            max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p)
        if rollout.HasField("routed_experts"):  # R3: carried to the learner as it came
            scored.samples[-1].routed_experts.CopyFrom(rollout.routed_experts)
    return without_routing_over_the_limit(scored)


def without_routing_over_the_limit(scored: events.ScoredGroup) -> events.ScoredGroup:
    """The group, its samples' routing records (R3) left out when with them it would be too large for
    the bus: the group still trains (the learner routes those samples itself and counts them), where
    a refused record would lose it."""
    if not any(s.HasField("routed_experts") for s in scored.samples):
        return scored
    too_large = oversize(scored.group_id, codec.encode(scored))
    if too_large is not None:
        log.warning("group %s: routing records left out of its scored record (%s)", scored.group_id, too_large)
        for sample in scored.samples:
            sample.ClearField("routed_experts")
    return scored


def verdict_fields(res: ScoreResult) -> dict:
    """reward, correct (when known), status, parts, detail and reason: the fields ScoredSample and
    ScoreReply share, filled from one ScoreResult."""
    fields = {"reward": res.reward, "status": res.status.value, "detail": res.detail, "reason": res.reason,
              "parts": events.RewardParts(correctness=res.parts.correctness, genrm=res.parts.genrm)}
    if res.correct is not None:
        fields["correct"] = res.correct
    return fields
