"""svc_source: owns the datasets and generators and publishes their prompts onto `prompts` as the
pipeline consumes them, a bounded lead ahead of the rollout service.

The sequence is a pure function of the config: draw d takes the source a seeded weighted
interleave picks (order.Interleave) and that source's next row in its epoch's seeded block shuffle
(order.EpochOrder). Each batch of prompts is acknowledged, then the position (draws and every
source's epoch and position) is written to the compacted `source_state` topic; a restart reads it
back, skips the draws of the batch the kill cut that reached `prompts` (state.published_since), and
goes on, so a kill -9 loses nothing and repeats at most what the tail scan missed, under the same
message ids. A bad row (undecodable, a missing gold, an unknown verifier kind, an unknown
generator task) is skipped, counted and dead-lettered; a source that cannot be opened at all stops
the service with one line (the supervisor backs off and retries) rather than silently shifting the
mixture onto the others.
"""
from __future__ import annotations

import hashlib
import logging
import time

from kafka.errors import KafkaError

from m1flow.bus import Producer, codec
from m1flow.bus.lag import GroupLag
from m1flow.bus.topics import CONTROL, DLQ, POLICY, PROMPTS, SOURCE_STATE
from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events
from m1flow.data.dataset import open_source
from m1flow.data.record import RowError
from m1flow.runtime.service import Service
from m1flow.source import BadRow, prompt_for, row_letter
from svc_source import metrics
from svc_source.config import SourceConfig
from svc_source.cursor import Cursor
from svc_source.lead import Lead
from svc_source.order import Interleave
from svc_source.state import load_state, published_since

log = logging.getLogger(__name__)


class SourceUnreadable(SystemExit):
    """A configured source that cannot be opened: the service stops with one line saying which."""


def config_digest(cfg: SourceConfig) -> str:
    """What the sequence depends on; a state written under another digest is not resumed."""
    parts = [str(cfg.seed), str(cfg.block_rows), str(cfg.max_epochs)]
    parts += [s.model_dump_json(exclude={"weight"}) for s in cfg.sources]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


class SourceService(Service):
    name = "source"
    Config = SourceConfig

    def __init__(self, config: SourceConfig) -> None:
        super().__init__(config)
        self.config: SourceConfig = config
        self.cursors: list[Cursor] = []
        self.draws = 0
        self.mixture_version = 0
        self.skip: set[int] = set()  # draws already on `prompts` past the state (a batch a kill cut)
        self.pending: tuple[list[events.Prompt], list[events.DeadLetter]] | None = None  # drawn, not acked

    @property
    def state_key(self) -> str:
        """The state key, stamped on every prompt's origin: one per run and consumer group."""
        return f"{self.config.run_id}/{self.group_id}"

    # ---- start: open the sources, resume the position --------------------------------------
    def start(self) -> None:
        cfg = self.config
        if not cfg.sources:
            raise SourceUnreadable("source: no `sources` configured; nothing to publish")
        opened = []
        for i, dataset in enumerate(cfg.sources):
            try:
                opened.append(open_source(dataset))
            except Exception as exc:  # noqa: BLE001 - any reason a source cannot open is said in one line
                raise SourceUnreadable(f"source: sources[{i}] ({dataset.name or dataset.path or dataset.generator}) "
                                       f"cannot be opened: {type(exc).__name__}: {exc}") from None
        names = [s.name for s in opened]
        if len(set(names)) != len(names):
            raise SourceUnreadable(f"source: source names must be unique, got {names}")
        self.interleave = Interleave([d.weight for d in cfg.sources], cfg.seed, self.mixture_version)
        self.producer = Producer(cfg.bootstrap, f"source-{cfg.replica}", suffix=cfg.output_suffix,
                                 client=cfg.kafka_client)
        state = self._resume_state()
        at = {c.source: c for c in state.cursors} if state else {}
        self.draws = state.draws if state else 0
        self.cursors = [Cursor(src, cfg.seed, cfg.block_rows, cfg.max_epochs,
                               at[src.name].epoch if src.name in at else 0,
                               at[src.name].position if src.name in at else 0) for src in opened]
        self.where = {src.name: d.path or d.generator for src, d in zip(opened, cfg.sources)}  # for bad-row letters
        self.skip = published_since(cfg.bootstrap, self._topic(PROMPTS.name), self.state_key, self.draws, cfg.scan_back)
        log.info("resuming at draw %s (%s); %s draws past it already on `prompts`", self.draws,
                 ", ".join(f"{c.name} e{c.epoch}@{c.position}/{c.n}" for c in self.cursors), len(self.skip))
        self.watcher = TopicWatcher(cfg.bootstrap, (POLICY, CONTROL), f"source-{cfg.replica}-watch")
        replaying = bool(cfg.output_suffix)
        lag = None if replaying or cfg.lead_steps <= 0 else GroupLag(cfg.bootstrap, f"source-{cfg.replica}-lag")
        self.lead = Lead(lag, cfg.rollout_group, PROMPTS.name, cfg.lead_steps, cfg.batch_groups, cfg.lag_refresh_s)
        self._apply(self.watcher.catch_up())

    def _topic(self, name: str) -> str:
        return f"{name}.{self.config.output_suffix}" if self.config.output_suffix else name

    def _resume_state(self) -> events.SourceState | None:
        while not self.stop.is_set():
            try:
                state = load_state(self.config.bootstrap, self._topic(SOURCE_STATE.name), self.state_key)
                break
            except (TimeoutError, KafkaError) as exc:
                log.warning("reading `source_state` failed, retrying: %s", exc)
        else:
            return None
        if state is not None and state.config_digest != config_digest(self.config):
            log.warning("the state under %s was written for another config (seed, sources, block): starting over",
                        self.state_key)
            return None
        return state

    def _apply(self, messages: list) -> None:
        for msg in messages:
            if isinstance(msg, events.PolicyVersion):
                self.lead.learner_batch(msg.batch_groups)

    # ---- publishing ----------------------------------------------------------------------
    def draw(self, n: int) -> tuple[list[events.Prompt], list[events.DeadLetter]]:
        """The next n draws' prompts and bad-row letters (fewer when every source is exhausted)."""
        cfg = self.config
        prompts, letters = [], []
        exhausted = [c.exhausted for c in self.cursors]
        head = codec.header(self.name, run_id=cfg.run_id)  # one per batch; each prompt's id is its draw's
        while len(prompts) + len(letters) < n:
            j = self.interleave.choice(self.draws, exhausted)
            if j is None:
                break
            cursor, draw = self.cursors[j], self.draws
            self.draws += 1
            if draw in self.skip:  # published before the restart, past the state record
                cursor.skip()
                self.skip.discard(draw)
            else:
                epoch, position, row, item = cursor.draw()
                origin = events.SourceCursor(source=cursor.name, epoch=epoch, position=position, draw=draw,
                                             mixture_version=self.mixture_version, stream=self.state_key)
                try:
                    if isinstance(item, Exception):
                        raise item
                    prompts.append(prompt_for(item, cfg.group_size, cfg.run_id, origin,
                                              path=self.where[cursor.name], row=row, header=head))
                except (RowError, ValueError, OSError) as exc:  # a bad row, a record the prompt refuses, a broken read
                    letters.append(row_letter(exc, cursor.name, row, epoch, self.name, self.group_id, cfg.run_id))
                    metrics.BAD_ROWS.labels(cursor.name, getattr(exc, "field", type(exc).__name__)).inc()
                    log.warning("bad row skipped: %s", exc)
            exhausted[j] = cursor.exhausted
        return prompts, letters

    def state(self) -> events.SourceState:
        return events.SourceState(
            header=codec.header(self.name, run_id=self.config.run_id), draws=self.draws,
            cursors=[events.SourceCursor(source=c.name, epoch=c.epoch, position=c.position) for c in self.cursors],
            mixture_version=self.mixture_version, config_digest=config_digest(self.config))

    def publish(self, n: int) -> int:
        """Draw, publish and acknowledge up to n prompts, then the state after them; returns how many.
        A batch whose send failed stays pending and is sent again (same ids) before anything new."""
        if self.pending is None:
            self.pending = self.draw(n)
        prompts, letters = self.pending
        if not prompts and not letters:
            self.pending = None
            return 0
        for prompt in prompts:
            self.producer.send(PROMPTS, prompt.prompt_id, prompt)
        for letter in letters:
            self.producer.send(DLQ, letter.source_topic, letter)
        self.producer.flush()  # the prompts (and the previous batch's state) are on the broker before the state says so
        # acknowledged by the next batch's flush (or close): one round trip a batch, not two. A kill
        # before then resumes from the previous state and skips this batch's draws (published_since)
        self.producer.send(SOURCE_STATE, self.state_key, self.state())
        self.pending = None
        for prompt in prompts:
            metrics.PUBLISHED.labels(prompt.origin.source).inc()
        self.lead.published(len(prompts))
        return len(prompts)

    def report(self) -> None:
        for c in self.cursors:
            metrics.EPOCH.labels(c.name).set(c.epoch)
            metrics.POSITION.labels(c.name).set(c.position)
        metrics.DRAWS.set(self.draws)
        metrics.OUTSTANDING.set(self.lead.outstanding)
        metrics.LEAD_LIMIT.set(-1 if self.lead.limit is None else self.lead.limit)

    def loop(self) -> None:
        held = None
        while not self.stop.is_set():
            try:
                self._apply(self.watcher.poll(0))
                self.lead.refresh()
                room = self.lead.room()
                n = self.config.publish_batch if room is None else min(room, self.config.publish_batch)
                published = self.publish(n) if n > 0 or self.pending else 0
            except KafkaError as exc:  # the broker is away: the state is unchanged until a batch is acked
                log.warning("publishing failed, retrying: %s", exc)
                published, n = 0, 0
                self.stop.wait(1.0)
            if n > 0 and published == 0 and all(c.exhausted for c in self.cursors):
                reason = "every source exhausted"
            else:
                reason = "" if n > 0 else "lead full"
            if reason != held:
                log.info("publishing %s (draw %s, %s outstanding, limit %s)", f"held: {reason}" if reason else "open",
                         self.draws, self.lead.outstanding, self.lead.limit)
                held = reason
            self.report()
            if reason:
                self.stop.wait(0.2)

    def shutdown(self) -> None:
        for closer in (getattr(self, "producer", None), getattr(self, "watcher", None), getattr(self, "lead", None)):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # noqa: BLE001 - closing the rest matters more
                    log.warning("closing %s failed: %s", type(closer).__name__, exc)


