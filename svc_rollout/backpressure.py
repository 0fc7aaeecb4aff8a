"""How far the rollouts run ahead of the learner, in learner steps (policy versions).

Every group sampled now is trained on after the groups already waiting for the learner: those the
reward service has not scored yet (its lag on `rollouts`), those the learner has not consumed yet
(its lag on `scored`), and the ones in flight in this replica. That many groups divided by the
learner's batch is how many versions stale the newest sample will be when it is trained on. A
replica stops admitting prompts while that exceeds `max_ahead_versions` full steps *beyond* the one
the learner can already take, and reads the lags of both consumer groups from Kafka, so every
replica sees the same backlog whatever the replica count.

Until the learner's consumer group first commits (as its announcement or a second reading shows:
`Backpressure._learner_lag`), the replica counts the groups it produced itself (the learner may be
loading; its lag is not known yet). A learner that never runs therefore pauses sampling after
(1 + max_ahead_versions) batches: run a rollout service alone with a large `max_ahead_versions`.

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

    def positions(self) -> tuple[int | None, dict[str, tuple[int, int]] | None]:
        """Records of `rollouts` the reward service has not committed, and the learner's committed and end
        offsets on `scored` (`GroupLag.positions`); None: that consumer group has never committed there."""
        return (self.groups.lag(self.reward_group, ROLLOUTS.name),
                self.groups.positions(self.learner_group, SCORED.name))

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
        self.announced: dict[str, int] = {}  # the learner's offsets on `scored` its newest step commits
        self._committed_seen: dict[str, int] = {}  # the learner's committed offsets at the previous reading
        self.pacer = LagPacer(self._read if backlog is not None else None, refresh_s, "consumer lag")

    @property
    def downstream(self) -> float:
        """Groups waiting for the reward service or the learner."""
        return self.pacer.waiting

    def _read(self) -> Reading:
        """Groups downstream: the learner's lag on `scored` (`_learner_lag`) and the reward service's on
        `rollouts`, in groups; counted from the learner's first commit a reading can vouch for (its first
        batch may still be loading)."""
        try:
            reward, positions = self.backlog.positions()
        except KafkaError as exc:  # the broker is away: nothing is consumed downstream either
            log.warning("reading consumer lag failed: %s", exc)
            return 0.0, True
        learner = self._learner_lag(positions)
        return (learner or 0) + (reward or 0) / max(1, self.group_size), learner is not None

    def _learner_lag(self, positions: dict[str, tuple[int, int]] | None) -> int | None:
        """Records of `scored` past what the learner has taken, per partition: the offsets its newest
        announcement says its step commits, or its committed offset as far as the previous reading saw it
        too, whichever is further; None while a partition has neither.

        The learner announces, then commits. A reading between the two put the step just taken back
        downstream (the batch after it then formed a version late: bench/README.md, learning.py): the
        announced offsets count. Under load this replica's `policy` consumer can hand it the announcement
        after a reading saw the commit, which let in groups sampled with the version before, past a bound
        of no lead (tests/checkpoint/test_s3_loop.py failed so once): a commit counts once a reading
        (about refresh_s) old, by when its announcement has come. The learner's commits of groups it
        skipped, which no announcement covers, count then too: nothing waits on an announcement that
        will not come."""
        seen, self._committed_seen = self._committed_seen, {k: c for k, (c, _) in (positions or {}).items()}
        if positions is None:
            return None
        lag = 0
        for key, (committed, end) in positions.items():
            known = [x for x in (self.announced.get(key), min(committed, seen[key]) if key in seen else None)
                     if x is not None]
            if not known:
                return None
            lag += max(0, end - max(known))
        return lag

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
        # (up to refresh_s away), so room opens as soon as the learner can take the next batch; readings
        # from now on take the learner's offsets from this announcement (`_learner_lag`).
        self.announced = dict(input_offsets or {})  # none: version 0, a bare policy
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
