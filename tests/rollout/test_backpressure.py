"""Backpressure by policy versions never deadlocks: a simulated loop (replicas, reward service,
learner with dynamic sampling, duplicates and an idle flush) keeps training whatever the learner's
batch, the replica count and the share of groups the learner skips, and the rollouts stay within
the bound on how far ahead they run. The Backpressure under test is the real one; only the Kafka
reading (Backlog.lags) is simulated."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from svc_rollout.backpressure import Backpressure

GROUP_SIZE, INFLIGHT, IDLE_TICKS, TICKS = 4, 8, 20, 1500


@dataclass
class Loop:
    """Records of `scored` the learner has not committed, and what it holds towards its batch."""

    batch: int
    skip: float
    duplicate: float
    rng: random.Random
    scored: list[bool] = field(default_factory=list)  # True: trainable
    read: int = 0  # records of `scored` the learner consumed
    committed: int = 0  # the learner's commit: up to its first held record, or all it read
    first_held: int | None = None
    stepped_at: int = 0  # records read when the last step was taken
    held: int = 0
    idle: int = 0
    steps: int = 0
    flushes: int = 0
    announced: list[dict[str, float]] = field(default_factory=list)

    def lags(self) -> tuple[int, int]:  # Backlog.lags: reward (rollouts) lag 0, learner lag
        return 0, len(self.scored) - self.committed

    def publish(self) -> None:
        """A group finished by a replica, scored at once (and sometimes regenerated: a duplicate)."""
        self.scored.append(self.rng.random() >= self.skip)
        if self.rng.random() < self.duplicate:
            self.scored.append(False)  # the learner skips a group it already holds or applied

    def learn(self) -> None:
        """Consume up to one record per tick; train on a full batch, or on what it holds once idle."""
        if self.read < len(self.scored):
            self.idle = 0
            if self.scored[self.read]:
                self.held += 1
                self.first_held = self.read if self.first_held is None else self.first_held
            self.read += 1
            self.committed = self.read if self.first_held is None else self.first_held
            if self.held == self.batch:
                self._step()
        else:
            self.idle += 1
            if self.held and self.idle >= IDLE_TICKS:
                self.flushes += 1
                self._step()

    def _step(self) -> None:
        consumed = self.read - self.stepped_at
        self.announced.append({"groups": float(self.held), "groups_consumed": float(consumed)})
        self.committed = self.stepped_at = self.read
        self.held, self.first_held, self.steps = 0, None, self.steps + 1


@pytest.mark.parametrize("batch", [1, 3, 16])
@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("skip,duplicate", [(0.0, 0.0), (0.6, 0.2)])
def test_backpressure_never_deadlocks_and_bounds_the_lead(batch, replicas, skip, duplicate):
    loop = Loop(batch, skip, duplicate, random.Random(batch * 100 + replicas * 10 + int(skip * 10)))
    pressure = [Backpressure(loop, 1.0, batch, GROUP_SIZE, refresh_s=0.0) for _ in range(replicas)]
    in_flight = [0] * replicas
    seen = 0
    for _ in range(TICKS):
        for r, bp in enumerate(pressure):
            bp.refresh()
            for stats in loop.announced[seen:]:
                bp.learner_step(batch, stats)
            room = bp.room(in_flight[r])
            in_flight[r] += min(INFLIGHT - in_flight[r], INFLIGHT if room is None else room)
            if in_flight[r]:  # one group of each replica finishes per tick
                in_flight[r] -= 1
                loop.publish()
                bp.produced()
        seen = len(loop.announced)
        loop.learn()
        lead = len(loop.scored) - loop.committed
        bound = (2 + 1.0) * max(batch, *(bp.batch_groups for bp in pressure)) + replicas * (INFLIGHT + 2) \
            + sum(bp.margin() for bp in pressure)  # each replica's margin for the skips' spread
        assert lead <= bound, (lead, bound)
    assert loop.steps >= TICKS // (4 * batch / (1 - skip) + IDLE_TICKS), loop.steps  # kept training
    assert loop.steps - loop.flushes >= loop.flushes, (loop.steps, loop.flushes)  # mostly full batches


def test_the_step_size_follows_what_the_learner_consumes():
    bp = Backpressure(None, 1.0, 4, GROUP_SIZE)
    for _ in range(20):
        bp.learner_step(4, {"groups": 4.0, "groups_consumed": 10.0})
    assert bp.batch_groups == 10  # 4 trained + 6 skipped records of `scored` per step
    assert bp.skip_share == pytest.approx(0.6)
    assert bp.margin() == pytest.approx(2.0 * (4 * 0.6) ** 0.5 / 0.4)  # 2 sd of a negative binomial's count
    bp.learner_step(4, {"groups": 2.0, "groups_consumed": 2.0})  # an idle flush of 2: never below the batch
    assert 4 <= bp.batch_groups <= 10


class Uncommitted:
    """A learner (and reward service) whose consumer groups have not committed yet."""

    reading: tuple[int | None, int | None] = (None, None)

    def lags(self) -> tuple[int | None, int | None]:
        return self.reading


def test_before_the_learner_commits_the_replica_counts_what_it_produced():
    backlog = Uncommitted()
    bp = Backpressure(backlog, 0.0, 4, GROUP_SIZE, refresh_s=0.0)
    bp.refresh()
    assert bp.room(0) == 4  # one learner batch
    bp.produced(4)
    bp.refresh()
    assert bp.room(0) == 0  # the learner has not taken them yet: wait, however often the lag is read
    backlog.reading = (0, 1)  # it committed: 1 group left downstream
    bp.refresh()
    assert bp.room(1) == 2


def starved_ticks(margin_sd: float, batch: int = 16, skip: float = 0.2, train_ticks: int = 32,
                  ticks: int = 20_000) -> tuple[int, int]:
    """One replica that finishes a group a tick; a learner that takes what `scored` holds towards its
    batch, trains a full batch for `train_ticks` (its records stay uncommitted meanwhile), then announces
    and commits. Returns the ticks the learner sat with a batch to fill and nothing to read, and its
    steps. The Backpressure is the real one, reading the simulated lag."""
    rng = random.Random(7)
    scored: list[bool] = []  # True: trainable
    read = committed = held = training = 0
    announced: list[dict[str, float]] = []

    class Lags:
        def lags(self) -> tuple[int, int]:
            return 0, len(scored) - committed

    bp = Backpressure(Lags(), 1.0, batch, GROUP_SIZE, refresh_s=0.0, margin_sd=margin_sd)
    in_flight = seen = starved = 0
    for _ in range(ticks):
        bp.refresh()
        for stats in announced[seen:]:
            bp.learner_step(batch, stats)
        seen = len(announced)
        in_flight += min(INFLIGHT - in_flight, bp.room(in_flight))
        if in_flight:
            in_flight -= 1
            scored.append(rng.random() >= skip)
            bp.produced()
        if training:
            training -= 1
            if not training:
                announced.append({"groups": float(batch), "groups_consumed": float(read - committed)})
                committed, held = read, 0
            continue
        while held < batch and read < len(scored):  # a poll takes what is there
            held += scored[read]
            read += 1
        if held == batch:
            training = train_ticks
        else:
            starved += 1
    return starved, len(announced)


def test_the_margin_lets_the_next_batch_form_while_one_trains():
    """Held at exactly two mean steps' worth, the batch after the one in training comes up short
    whenever its skips run above the mean, and the learner waits after its step for groups the bound
    only then lets in; the margin takes most of that wait away, and with it the steps' time."""
    without, steps_without = starved_ticks(0.0)
    with_margin, steps_with = starved_ticks(2.0)
    assert with_margin < without / 3, (with_margin, without)
    assert steps_with > steps_without, (steps_with, steps_without)
