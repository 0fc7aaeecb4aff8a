"""Generation metrics on /metrics: throughput, what is in flight, how full the batch is, reloads,
and the backpressure that decides whether prompts are admitted."""
from __future__ import annotations

import time
from collections import deque

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from m1flow.bus import Context
    from svc_rollout.backpressure import Backpressure
    from m1flow.engines.base import Engine

TOKENS = Counter("m1flow_rollout_tokens_total", "tokens generated")
GROUPS = Counter("m1flow_rollout_groups_total", "groups generated")
TOKENS_PER_S = Gauge("m1flow_rollout_tokens_per_second", "tokens generated per second over the last window")
GROUPS_IN_FLIGHT = Gauge("m1flow_rollout_groups_in_flight", "groups admitted into the engine and not finished")
REQUESTS_IN_FLIGHT = Gauge("m1flow_rollout_requests_in_flight", "sequences (samples) in flight in the engine")
OCCUPANCY = Gauge("m1flow_rollout_batch_occupancy", "sequences in flight / sequences the engine decodes together")
RELOAD_S = Gauge("m1flow_rollout_reload_seconds", "time the last policy load took")
VERSIONS_AHEAD = Gauge("m1flow_rollout_versions_ahead", "learner steps of groups waiting before a new one is trained")
STEP_SEQUENCES = Histogram("m1flow_rollout_step_sequences", "sequences one engine step decodes together",
                           buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096))
PAUSED = Gauge("m1flow_rollout_paused", "1 while prompts are not admitted (control pause, backpressure, reload)")


class Throughput:
    """Tokens per second over a sliding window of finished groups."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self.events: deque[tuple[float, int]] = deque()

    def add(self, tokens: int) -> None:
        now = time.monotonic()
        self.events.append((now, tokens))
        TOKENS.inc(tokens)
        GROUPS.inc()
        self._expire(now)

    def rate(self) -> float:
        now = time.monotonic()
        self._expire(now)
        if not self.events:
            return 0.0
        span = max(now - self.events[0][0], 1.0)
        return sum(t for _, t in self.events) / span

    def _expire(self, now: float) -> None:
        while self.events and now - self.events[0][0] > self.window_s:
            self.events.popleft()


class Reporter:
    """What a replica reports: gauges on /metrics (at most every gauges_every_s: set each engine step,
    they were 7% of a replica's CPU under py-spy), throughput and staleness on `metrics` every
    metric_every_s, and each policy load when it happens."""

    def __init__(self, gauges_every_s: float = 0.5, metric_every_s: float = 10.0) -> None:
        self.gauges_every_s, self.metric_every_s = gauges_every_s, metric_every_s
        self.throughput = Throughput()
        self.metric_at = time.monotonic()
        self.gauges_at = 0.0
        self.reloads: list[tuple[int, float]] = []  # (version, seconds), reported on the next tick

    def reloaded(self, version: int, seconds: float) -> None:
        RELOAD_S.set(seconds)
        self.reloads.append((version, seconds))

    def report(self, ctx: Context, engine: Engine, backpressure: Backpressure) -> None:
        if time.monotonic() - self.gauges_at >= self.gauges_every_s:
            self.gauges_at = time.monotonic()
            GROUPS_IN_FLIGHT.set(engine.in_flight())
            REQUESTS_IN_FLIGHT.set(engine.sequences_in_flight())
            OCCUPANCY.set(min(1.0, engine.sequences_in_flight() / max(1, engine.capacity)))
            VERSIONS_AHEAD.set(backpressure.versions_ahead(engine.in_flight()))
            TOKENS_PER_S.set(self.throughput.rate())
        for version, seconds in self.reloads:
            ctx.metric("rollout/reload_s", seconds, step=version, engine=engine.name)
        self.reloads.clear()
        if time.monotonic() - self.metric_at >= self.metric_every_s:
            self.metric_at = time.monotonic()
            ctx.metric("rollout/tokens_per_s", self.throughput.rate(), step=engine.version, engine=engine.name)
            ctx.metric("rollout/versions_ahead", backpressure.versions_ahead(engine.in_flight()),
                       step=engine.version)
