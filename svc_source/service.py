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
from collections import Counter
from typing import Any

from kafka.errors import KafkaError

from m1flow.bus import Producer, codec
from m1flow.bus.lag import GroupLag
from m1flow.bus.topics import CONTROL, DLQ, POLICY, PROMPTS, SOURCE_STATE
from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events
from m1flow.data.dataset import open_source
from m1flow.data.record import RowError
from m1flow.runtime.service import Service
from m1flow.prompt_wire import Envelope
from m1flow.source import message_id_for, prompt_bodies, row_letter
from svc_source import metrics
from svc_source.config import SourceConfig
from svc_source.cursor import Ahead, Cursor, Reader
from svc_source.lead import Lead
from svc_source.order import Interleave
from svc_source.reader import ReadAhead
from svc_source.state import load_state, published_since
from svc_source.window import Batch, Record, Window

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
        self.reader: ReadAhead | None = None

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
        self.where = {src.name: d.path or d.generator for src, d in zip(opened, cfg.sources)}  # for bad-row letters
        self.reader = ReadAhead(cfg.sources, cfg.group_size, [self.where[s.name] for s in opened]) \
            if cfg.read_ahead else None
        self.cursors = [Cursor(src, cfg.seed, cfg.block_rows, cfg.max_epochs,
                               at[src.name].epoch if src.name in at else 0,
                               at[src.name].position if src.name in at else 0,
                               *self._readers(j, src)) for j, src in enumerate(opened)]
        self.window = Window(self.producer, self.state_key, cfg.inflight_batches)
        self.skip = published_since(cfg.bootstrap, self._topic(PROMPTS.name), self.state_key, self.draws, cfg.scan_back)
        log.info("resuming at draw %s (%s); %s draws past it already on `prompts`", self.draws,
                 ", ".join(f"{c.name} e{c.epoch}@{c.position}/{c.n}" for c in self.cursors), len(self.skip))
        self.watcher = TopicWatcher(cfg.bootstrap, (POLICY, CONTROL), f"source-{cfg.replica}-watch")
        replaying = bool(cfg.output_suffix)
        lag = None if replaying or cfg.lead_steps <= 0 else GroupLag(cfg.bootstrap, f"source-{cfg.replica}-lag")
        self.lead = Lead(lag, cfg.rollout_group, PROMPTS.name, cfg.lead_steps, cfg.batch_groups, cfg.lag_refresh_s)
        self._apply(self.watcher.catch_up())

    def _readers(self, j: int, src: Any) -> tuple[Reader, Ahead | None]:
        """A cursor's block reader (each row's prompt body, m1flow.source.prompt_bodies, or its
        error) and whom to tell the next block: the reader process, or this one, reading in turn."""
        if self.reader is not None:
            reader = self.reader
            return (lambda start, stop: reader.read(j, start, stop)), (lambda start, stop: reader.ahead(j, start, stop))
        group_size, path = self.config.group_size, self.where[src.name]
        return (lambda start, stop: prompt_bodies(src, start, stop, group_size, path)), None

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
    def draw(self, n: int) -> tuple[list[Record], int, Counter]:
        """The next n draws as records (prompts and bad-row letters; fewer when every source is
        exhausted), how many are prompts, and the prompts per source."""
        cfg = self.config
        records: list[Record] = []
        per_source: Counter = Counter()
        exhausted = [c.exhausted for c in self.cursors]
        envelope = Envelope(codec.header(self.name, run_id=cfg.run_id))  # one header a batch; ids per draw
        prompts_topic, stream, mixture = PROMPTS.name, self.state_key, self.mixture_version  # the producer suffixes
        rest = events.SourceCursor(mixture_version=mixture, stream=stream).SerializeToString()
        heads: dict[str, bytes] = {}
        choice, skip, origin_of = self.interleave.choice, self.skip, envelope.origin
        while len(records) < n:
            j = choice(self.draws, exhausted)
            if j is None:
                break
            cursor, draw = self.cursors[j], self.draws
            self.draws += 1
            if draw in skip:  # published before the restart, past the state record
                cursor.skip()
                skip.discard(draw)
                exhausted[j] = cursor.exhausted
                continue
            epoch, position, row, item = cursor.draw()
            exhausted[j] = cursor.exhausted
            if isinstance(item, Exception):  # a bad row, a record the prompt refuses, a broken read
                records.append(self._letter(item, cursor.name, row, epoch))
                continue
            prompt_id, body = item
            value = envelope.encode(message_id_for(stream, cursor.name, epoch, position), body,
                                    origin_of(heads, cursor.name, epoch, position, draw, rest))
            records.append((prompts_topic, prompt_id, value))
            per_source[cursor.name] += 1
        return records, sum(per_source.values()), per_source

    def _letter(self, exc: Exception, source: str, row: int, epoch: int) -> Record:
        cfg = self.config
        letter = row_letter(exc, source, row, epoch, self.name, self.group_id, cfg.run_id)
        metrics.BAD_ROWS.labels(source, getattr(exc, "field", type(exc).__name__)).inc()
        log.warning("bad row skipped: %s", exc)
        return DLQ.name, letter.source_topic, codec.encode(letter)

    def state(self) -> events.SourceState:
        return events.SourceState(
            header=codec.header(self.name, run_id=self.config.run_id), draws=self.draws,
            cursors=[events.SourceCursor(source=c.name, epoch=c.epoch, position=c.position) for c in self.cursors],
            mixture_version=self.mixture_version, config_digest=config_digest(self.config))

    def publish(self, n: int) -> int:
        """Draw and send up to n prompts while the batches before them are in flight; returns how
        many. Each batch's state record follows once it and every batch before it is acknowledged
        (svc_source.window); with `inflight_batches` in flight, this waits a little for the oldest."""
        window = self.window
        window.settle()
        if window.full:
            window.settle(0.05)
            if window.full:
                return 0
        records, prompts, per_source = self.draw(n)
        if not records:
            return 0
        window.send(Batch(records, self.state()))
        for source, count in per_source.items():
            metrics.PUBLISHED.labels(source).inc(count)
        self.lead.published(prompts)
        return prompts

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
                published = self.publish(n) if n > 0 else self.window.settle()
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
        if getattr(self, "window", None) is not None:
            try:
                self.window.drain()  # the batches in flight acknowledged, then their state
            except Exception as exc:  # noqa: BLE001 - the restart's tail scan covers what is left
                log.warning("acknowledging the last batches failed: %s", exc)
        for closer in (getattr(self, "producer", None), getattr(self, "watcher", None), getattr(self, "lead", None),
                       self.reader):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # noqa: BLE001 - closing the rest matters more
                    log.warning("closing %s failed: %s", type(closer).__name__, exc)


