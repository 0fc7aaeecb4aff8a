"""svc_source: owns the datasets and generators and publishes their prompts onto `prompts` as the
pipeline consumes them, a bounded lead ahead of the rollout service.

The sequence is a pure function of the config: draw d takes the source a seeded weighted
interleave picks (order.Interleave) and that source's next row in its epoch's seeded block shuffle
(order.EpochOrder). Each batch of prompts is acknowledged, then the position (draws and every
source's epoch and position) is written to the compacted `source_state` topic; a restart reads it
back, skips the draws of the batch the kill cut that reached `prompts` (state.published_since), and
goes on, so a kill -9 loses nothing and repeats at most what the tail scan missed, under the same
message ids. Rows whose prompt is a row of one of the run's eval sets (`eval_sets`, m1flow.heldout)
are drawn and dropped, counted: the sequence stays a function of the config and held-out rows never
reach training. A bad row (undecodable, a missing gold, an unknown verifier kind, an unknown
generator task) is skipped, counted and dead-lettered; a source that cannot be opened at all stops
the service with one line (the supervisor backs off and retries) rather than silently shifting the
mixture onto the others.
"""
from __future__ import annotations

import logging

from kafka.errors import KafkaError

from m1flow.bus import Producer, codec
from m1flow.bus.clients import ClientError
from m1flow.bus.control import CommandRule, ControlFollower
from m1flow.bus.lag import GroupLag
from m1flow.bus.topics import CONTROL, POLICY, PROMPTS, SCORED, SOURCE_STATE
from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events
from m1flow.runtime.service import Service
from m1flow.security.announcements import Guard
from svc_source import metrics
from svc_source.commands import Commands
from svc_source.config import SourceConfig
from svc_source.draws import Draws
from svc_source.filter import DifficultyFilter
from svc_source.lead import Lead
from svc_source.resume import config_digest, original_schedule, read_states, resume_state
from svc_source.scored import ScoredFollower
from svc_source.sources import Sources, SourceUnreadable
from svc_source.state import published_since
from svc_source.window import Batch, Window

__all__ = ["SourceService", "SourceUnreadable", "config_digest"]
log = logging.getLogger(__name__)


class SourceService(Service, name="source", config=SourceConfig):
    """The source's life, as a list of its parts: the sources (opened, read ahead), the draws (the
    sequence, resumed from the state), the window (batches in flight, then their state), the commands
    (control and policy), the lead (the pacing by the rollout group's lag) and the online filter."""

    config: SourceConfig

    def __init__(self, config: SourceConfig) -> None:
        super().__init__(config)
        self.sources: Sources | None = None
        self.scored: ScoredFollower | None = None

    @property
    def state_key(self) -> str:
        """The state key, stamped on every prompt's origin: one per run and consumer group."""
        return f"{self.config.run_id}/{self.group_id}"

    @property
    def replaying(self) -> bool:
        return bool(self.config.output_suffix)

    @property
    def cursors(self) -> list:
        return self.draws.cursors

    # ---- start: open the sources, resume the position, follow the rest ----------------------
    def start(self) -> None:
        cfg = self.config
        self.sources = Sources(cfg)
        self.producer = Producer(cfg.bootstrap, f"source-{cfg.replica}", suffix=cfg.output_suffix,
                                 client=cfg.kafka_client)
        records = read_states(cfg, self._topic(SOURCE_STATE.name), self.state_key, self.stop)
        state = resume_state(cfg, records, self.state_key)
        mixture = self.sources.initial_mixture()
        mixture = mixture.restored(state) if state is not None else mixture
        self.sources.start_reader()
        self.draws = Draws(self.sources, self.state_key, self.group_id, mixture, state)
        self.window = Window(self.producer, self.state_key, cfg.inflight_batches, self.draws.refused)
        self.draws.skip = published_since(cfg.bootstrap, self._topic(PROMPTS.name), self.state_key,
                                          self.draws.draws, cfg.scan_back)
        log.info("resuming at draw %s (%s); %s draws past it already on `prompts`", self.draws.draws,
                 ", ".join(f"{c.name} e{c.epoch}@{c.position}/{c.n}" for c in self.cursors), len(self.draws.skip))
        self.control = self._control()
        self._judging(records if state is not None else {})
        lag = None if self.replaying or cfg.lead_steps <= 0 else GroupLag(cfg.bootstrap, f"source-{cfg.replica}-lag")
        self.lead = Lead(lag, cfg.rollout_group, PROMPTS.name, cfg.lead_steps, cfg.batch_groups, cfg.lag_refresh_s)
        self.commands = Commands(self.draws, self.window, self.producer, self.lead, config_digest(cfg))
        # commands up to the one in force were applied before the restart
        self.commands.start(self.control.catch_up(after=self.draws.mixture.command_id))

    def _control(self) -> ControlFollower:
        """`policy` (the announcements the guard admits) and `control`: a replay follows the original
        run's mixtures, not today's commands."""
        cfg = self.config
        watcher = TopicWatcher(cfg.bootstrap, (POLICY, CONTROL), f"source-{cfg.replica}-watch",
                               group_id=self.group_id, client=cfg.kafka_client)
        handles = {"set_window"} if self.replaying else {"set_window", "set_mixture"}
        # an announcement the guard refuses never reaches the commands: the lead keeps its batch
        return ControlFollower(watcher, CommandRule(cfg.run_id, frozenset(handles)), Guard(cfg.security).admits)

    def _judging(self, records: dict[str, events.SourceState]) -> None:
        """A replay's schedule of mixtures; else the online difficulty filter, when enabled."""
        cfg = self.config
        if self.replaying:
            self.draws.schedule = original_schedule(read_states(cfg, SOURCE_STATE.name, self.state_key, self.stop),
                                                    self.state_key, self.draws.mixture)
            if cfg.filter.enabled:
                log.info("replaying: the online filter is off (the replay draws what a run without it draws)")
            return
        if cfg.filter.enabled:
            judged = self.draws.filter = DifficultyFilter(cfg.filter, {c.name: c.n for c in self.cursors})
            judged.restore({k: r for k, r in records.items() if k.startswith(f"{self.state_key}/retired/")})
            self.scored = ScoredFollower(cfg.bootstrap, SCORED.name, f"source-{cfg.replica}-scored", cfg.run_id)

    def _topic(self, name: str) -> str:
        return f"{name}.{self.config.output_suffix}" if self.config.output_suffix else name

    # ---- publishing ----------------------------------------------------------------------
    def publish(self, n: int) -> int:
        """Draw and send up to n prompts while the batches before them are in flight; returns how
        many. Each batch's state record follows once it and every batch before it is acknowledged
        (svc_source.window: the prompts are counted published then); with `inflight_batches` in
        flight, this waits a little for the oldest."""
        window = self.window
        window.settle()
        if window.full:
            window.settle(0.05)
            if window.full:
                return 0
        records, origins, per_source = self.draws.draw(n, self.commands.use)
        if not records:
            return 0
        prompts = sum(per_source.values())
        window.send(Batch(records, self.draws.state(self.commands.digest), origins, per_source))
        self.lead.published(prompts)
        return prompts

    def follow_scores(self) -> None:
        """Judge the groups scored since the last call; keep changed retired sets on `source_state`."""
        judged = self.draws.filter
        if judged is None or self.scored is None:
            return
        for group in self.scored.poll():
            kind = judged.scored(group)
            if group.prompt_id in judged.drawn:
                metrics.JUDGED.labels(judged.drawn[group.prompt_id][0], kind or "in_band").inc()
        saved = judged.records()
        for name, record in saved:
            record.header.CopyFrom(codec.header(self.name, run_id=self.config.run_id))
            self.producer.send(SOURCE_STATE, f"{self.state_key}/retired/{name}", record)
        if saved:
            for name, counts in judged.counts().items():
                for kind, count in counts.items():
                    metrics.RETIRED.labels(name, kind).set(count)

    def step(self) -> tuple[int, int]:
        """One turn: commands, scores, the lead; publish what room allows. (prompts asked, published)"""
        self.commands.apply(self.control.poll(0))
        self.follow_scores()
        self.lead.refresh()
        room = self.lead.room()
        n = self.config.publish_batch if room is None else min(room, self.config.publish_batch)
        return n, (self.publish(n) if n > 0 else self.window.settle())

    def held_by(self, n: int, published: int) -> str:
        """Why nothing more is published now ('' when publishing)."""
        if n > 0 and published == 0 and self.draws.idle():
            return "every source exhausted" if all(self.draws.exhausted()) else "every source left has weight 0"
        return "" if n > 0 else "lead full"

    def report(self) -> None:
        for c in self.cursors:
            metrics.EPOCH.labels(c.name).set(c.epoch)
            metrics.POSITION.labels(c.name).set(c.position)
        metrics.DRAWS.set(self.draws.draws)
        metrics.OUTSTANDING.set(self.lead.outstanding)
        metrics.LEAD_LIMIT.set(-1 if self.lead.limit is None else self.lead.limit)

    def loop(self) -> None:
        held = None
        while not self.stop.is_set():
            try:
                n, published = self.step()
            except (KafkaError, ClientError) as exc:  # the broker is away: the state is unchanged until a batch is acked
                log.warning("publishing failed, retrying: %s", exc)
                n, published = 0, 0
                self.stop.wait(1.0)
            reason = self.held_by(n, published)
            if reason != held:
                log.info("publishing %s (draw %s, %s outstanding, limit %s)", f"held: {reason}" if reason else "open",
                         self.draws.draws, self.lead.outstanding, self.lead.limit)
                held = reason
            self.report()
            if reason:  # a full lead reads the lag again soon: it caps the pace at a lead per read
                self.stop.wait(self.config.lag_refresh_s if reason == "lead full" else 0.2)

    def shutdown(self) -> None:
        if getattr(self, "window", None) is not None:
            try:
                self.window.drain()  # the batches in flight acknowledged, then their state
            except Exception as exc:  # noqa: BLE001 - the restart's tail scan covers what is left
                log.warning("acknowledging the last batches failed: %s", exc)
        judged = self.draws.filter if getattr(self, "draws", None) is not None else None
        if judged is not None and getattr(self, "producer", None) is not None:
            for name, record in judged.records(force=True):  # the retirements since the last save
                self.producer.send(SOURCE_STATE, f"{self.state_key}/retired/{name}", record)
        for closer in (getattr(self, "producer", None), getattr(self, "control", None), getattr(self, "lead", None),
                       self.sources, self.scored):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # noqa: BLE001 - closing the rest matters more
                    log.warning("closing %s failed: %s", type(closer).__name__, exc)
