"""How far the rollouts run ahead of the learner, in learner steps (policy versions).

Every group sampled now is trained on after the groups already waiting for the learner: those the
reward service has not scored yet (its lag on `rollouts`), those the learner has not consumed yet
(its lag on `scored`), and the ones in flight in this replica. That many groups divided by the
learner's batch is how many versions stale the newest sample will be when it is trained on. A
replica stops admitting prompts while that exceeds `max_ahead_versions` full steps *beyond* the one
the learner can already take, and reads the lags of both consumer groups from Kafka, so every
replica sees the same backlog whatever the replica count.

Until the learner's consumer group first commits, the replica counts the groups it produced
itself (the learner may be loading; its lag is not known yet). A learner that never runs therefore
pauses sampling after (1 + max_ahead_versions) batches: run a rollout service alone with a large
`max_ahead_versions`.

It cannot deadlock: it pauses only while at least one whole learner step's worth of records is in
flight or waiting downstream, so those finish, the learner can step, the backlog falls, and
sampling resumes. A step's worth is what the learner consumed per step lately (its trained groups plus those it skipped
as having nothing to teach or as duplicates, from the stats it announces on `policy`), never less
than its `batch_groups`: skipped groups stay in the learner's lag until the next step commits, so
counting only trainable ones would pause with too few trainable groups waiting. Should the skip rate
jump, the learner's idle flush (`batch_timeout_s`, once its input is idle and caught up, which a
paused rollout service makes it) still trains what it holds, commits, and unblocks sampling.

A step's worth is a mean, and the groups one batch takes vary: with a learner batch of B trainable
groups and a share p of the groups skipped, they number B/(1-p) on average with a standard deviation
of sqrt(B p)/(1-p) (a negative binomial). Held at exactly (1 + max_ahead_versions) means, the batch
after the one in training came up short whenever its skips ran above the mean, and the learner then
waited, after its step, for groups the bound had only just let in (bench/pipeline.py: waits of
0.3-1.4 s in most steps). So the bound has a margin of `margin_sd` such deviations, once: enough
groups that the next batch forms with high probability, a fraction of a step more staleness.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from kafka.errors import KafkaError

from m1flow.bus.lag import GroupLag, LagPacer, Reading
from m1flow.bus.topics import ROLLOUTS, SCORED

log = logging.getLogger(__name__)
STEP_SMOOTHING = 0.3  # weight of the newest step in the consumed-per-step average and the skip share
MAX_SKIP_SHARE = 0.9  # the margin's model stops growing here (a learner skipping nearly all flushes on idle)


class Backlog:
    """Committed-offset lag of the reward service on `rollouts` and of the learner on `scored`."""

    def __init__(self, bootstrap: str, reward_group: str, learner_group: str) -> None:
        self.reward_group, self.learner_group = reward_group, learner_group
        self.groups = GroupLag(bootstrap, "m1flow-rollout-backlog")

    def lags(self, learner_floor: Mapping[str, int] | None = None) -> tuple[int | None, int | None]:
        """Records the reward service (on `rollouts`) and the learner (on `scored`) have not committed
        (None: that consumer group has never committed there); the learner's offsets taken as at least
        `learner_floor` (those its last announcement said it commits)."""
        return (self.groups.lag(self.reward_group, ROLLOUTS.name),
                self.groups.lag(self.learner_group, SCORED.name, learner_floor))

    def close(self) -> None:
        self.groups.close()


class Backpressure:
    """The rollout service's pacing: groups in flight and downstream, under (1 + max_ahead_versions)
    learner steps and the margin."""

    def __init__(self, backlog: Backlog | None, max_ahead_versions: float, batch_groups: int,
                 group_size: int, refresh_s: float = 1.0, margin_sd: float = 2.0) -> None:
        self.backlog = backlog
        self.max_ahead_versions = max_ahead_versions
        self.margin_sd = margin_sd
        self.learner_batch = batch_groups  # trainable groups the learner's batch takes
        self.skip_share = 0.0  # smoothed share of the consumed groups the learner skipped
        self.batch_groups = batch_groups
        self.group_size = group_size
        self.consumed_per_step: float | None = None  # smoothed records of `scored` per learner step
        self.committing: dict[str, int] = {}  # the offsets on `scored` the last announcement said it commits
        self.pacer = LagPacer(self._read if backlog is not None else None, refresh_s, "consumer lag")

    @property
    def downstream(self) -> float:
        """Groups waiting for the reward service or the learner."""
        return self.pacer.waiting

    def _read(self) -> Reading:
        """Groups downstream: the learner's lag on `scored` and the reward service's on `rollouts` in
        groups; committed once the learner has (its first batch may still be loading)."""
        try:
            reward, learner = self.backlog.lags(self.committing)
        except KafkaError as exc:  # the broker is away: nothing is consumed downstream either
            log.warning("reading consumer lag failed: %s", exc)
            reward = learner = 0
        return (learner or 0) + (reward or 0) / max(1, self.group_size), learner is not None

    def learner_step(self, batch_groups: int, stats: Mapping[str, float],
                     input_offsets: Mapping[str, int] | None = None) -> None:
        """A `policy` announcement: the learner's batch, what its last step consumed, and the offsets on
        `scored` it commits with it."""
        consumed = stats.get("groups_consumed", stats.get("groups", 0.0))
        first = self.consumed_per_step is None
        self.consumed_per_step = consumed if first else (
            (1 - STEP_SMOOTHING) * self.consumed_per_step + STEP_SMOOTHING * consumed)
        self.batch_groups = max(batch_groups, math.ceil(self.consumed_per_step))
        self.learner_batch = batch_groups
        if consumed > 0:
            skipped = max(0.0, consumed - stats.get("groups", consumed)) / consumed
            self.skip_share = skipped if first else (1 - STEP_SMOOTHING) * self.skip_share + STEP_SMOOTHING * skipped
        # What that step consumed has left the backlog: count it now, not at the next lag reading
        # (up to refresh_s away), so room opens as soon as the learner can take the next batch. The
        # learner commits right after announcing, and a reading caught between the two (the one a held
        # replica takes in the same loop turn as the announcement, often) would put the step back: a
        # reading counts the learner's offsets as at least those announced. (Without them such a reading
        # held back until the commit showed, and a batch formed a version late: bench/README.md,
        # learning.py, 3 times in 38 versions of one traced run.)
        self.committing = dict(input_offsets or {})  # none (version 0, a bare policy): no floor
        self.pacer.consumed(consumed)

    def produced(self, groups: int = 1) -> None:
        """Groups this replica just published: counted downstream until the next reading includes them."""
        self.pacer.produced(groups)

    def refresh(self) -> None:
        self.pacer.refresh()

    def versions_ahead(self, in_flight_groups: int) -> float:
        """Learner steps' worth of groups that will be trained on before one sampled now."""
        return (self.downstream + in_flight_groups) / self.batch_groups

    def margin(self) -> float:
        """Groups beyond the bound: margin_sd standard deviations of the groups one batch takes."""
        p = min(self.skip_share, MAX_SKIP_SHARE)
        return self.margin_sd * math.sqrt(self.learner_batch * p) / (1 - p)

    def room(self, in_flight_groups: int) -> int | None:
        """How many more groups may be admitted now (None: no limit): up to (1 + max_ahead_versions)
        learner steps' worth in flight and downstream and the margin, never less than one step, so a
        batch can form."""
        limit = (1 + self.max_ahead_versions) * self.batch_groups + self.margin()
        return self.pacer.room(limit, in_flight_groups)

    def close(self) -> None:
        if self.backlog is not None:
            self.backlog.close()
