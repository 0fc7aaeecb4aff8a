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

import hashlib
import logging
from collections import Counter
from typing import Any

from kafka.errors import KafkaError

from m1flow.bus import Producer, codec
from m1flow.bus.lag import GroupLag
from m1flow.bus.topics import CONTROL, DLQ, METRICS, POLICY, PROMPTS, SCORED, SOURCE_STATE
from m1flow.bus.clients import ClientError
from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events
from m1flow.data.dataset import open_source
from m1flow.data.record import RowError
from m1flow.heldout import heldout_keys, prompt_key
from m1flow.runtime.service import Service
from m1flow.prompt_wire import Envelope
from m1flow.source import message_id_for, prompt_bodies, row_letter
from svc_source import metrics
from svc_source.config import SourceConfig
from svc_source.cursor import Ahead, Cursor, Reader
from svc_source.filter import DifficultyFilter
from svc_source.lead import Lead
from svc_source.mixture import Mixture, MixtureRefused, Schedule, history_key
from svc_source.order import Interleave
from svc_source.reader import ReadAhead
from svc_source.scored import ScoredFollower
from svc_source.state import load_states, published_since
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
        self.mixture = Mixture.initial({}, {})
        self.schedule: Schedule | None = None  # a replay's mixtures, from the original run's state
        self.skip: set[int] = set()  # draws already on `prompts` past the state (a batch a kill cut)
        self.reader: ReadAhead | None = None
        self.filter: DifficultyFilter | None = None  # the online difficulty filter, when enabled
        self.scored: ScoredFollower | None = None
        self.window_tokens = 0  # the largest output window `control` has set (a larger one is a new stage)
        self.heldout: set[bytes] = set()  # prompt keys of the eval sets' rows (m1flow.heldout): never published

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
        self.datasets = {src.name: d for src, d in zip(opened, cfg.sources)}
        self.heldout = heldout_keys(cfg.eval_sets, cfg.run_id)  # HeldOutError: one line, the service stops
        metrics.HELDOUT_PROMPTS.set(len(self.heldout))
        self.mixture = Mixture.initial({src.name: d.weight for src, d in zip(opened, cfg.sources)},
                                       {src.name: d.level for src, d in zip(opened, cfg.sources) if d.generator})
        self.producer = Producer(cfg.bootstrap, f"source-{cfg.replica}", suffix=cfg.output_suffix,
                                 client=cfg.kafka_client)
        records = self._states(self._topic(SOURCE_STATE.name))
        state = self._resume_state(records)
        if state is not None:
            self.mixture = self.mixture.restored(state)
        opened = [self._at_level(src) for src in opened]
        at = {c.source: c for c in state.cursors} if state else {}
        self.draws = state.draws if state else 0
        self.where = {src.name: d.path or d.generator for src, d in zip(opened, cfg.sources)}  # for bad-row letters
        files = any(not d.generator for d in cfg.sources)
        self.reader = ReadAhead(cfg.sources, cfg.group_size, [self.where[s.name] for s in opened]) \
            if cfg.read_ahead and files else None
        self.cursors = [Cursor(src, cfg.seed, cfg.block_rows, cfg.max_epochs,
                               at[src.name].epoch if src.name in at else 0,
                               at[src.name].position if src.name in at else 0,
                               *self._readers(j, src)) for j, src in enumerate(opened)]
        self.interleave = self._interleave()
        self.window = Window(self.producer, self.state_key, cfg.inflight_batches)
        self.skip = published_since(cfg.bootstrap, self._topic(PROMPTS.name), self.state_key, self.draws, cfg.scan_back)
        log.info("resuming at draw %s (%s); %s draws past it already on `prompts`", self.draws,
                 ", ".join(f"{c.name} e{c.epoch}@{c.position}/{c.n}" for c in self.cursors), len(self.skip))
        self.watcher = TopicWatcher(cfg.bootstrap, (POLICY, CONTROL), f"source-{cfg.replica}-watch",
                                    group_id=self.group_id, client=cfg.kafka_client)
        replaying = bool(cfg.output_suffix)
        if replaying:
            self.schedule = self._original_schedule()
        if cfg.filter.enabled and not replaying:
            self.filter = DifficultyFilter(cfg.filter, {c.name: c.n for c in self.cursors})
            if state is not None:
                self.filter.restore({k: r for k, r in records.items() if k.startswith(f"{self.state_key}/retired/")})
            self.scored = ScoredFollower(cfg.bootstrap, SCORED.name, f"source-{cfg.replica}-scored", cfg.run_id)
        elif cfg.filter.enabled:
            log.info("replaying: the online filter is off (the replay draws what a run without it draws)")
        lag = None if replaying or cfg.lead_steps <= 0 else GroupLag(cfg.bootstrap, f"source-{cfg.replica}-lag")
        self.lead = Lead(lag, cfg.rollout_group, PROMPTS.name, cfg.lead_steps, cfg.batch_groups, cfg.lag_refresh_s)
        history = self.watcher.catch_up()
        if self.mixture.command_id:  # commands up to the one in force were applied before the restart
            ids = [m.header.message_id if isinstance(m, events.Control) else "" for m in history]
            if self.mixture.command_id in ids:
                history = history[ids.index(self.mixture.command_id) + 1:]
        self.window_tokens = max((m.set_window.max_new_tokens for m in history if isinstance(m, events.Control)
                                  and m.WhichOneof("command") == "set_window"), default=0)
        self._apply(history)
        self._report_mixture()

    def _readers(self, j: int, src: Any) -> tuple[Reader, Ahead | None]:
        """A cursor's block reader (each row's prompt body, m1flow.source.prompt_bodies, or its
        error) and whom to tell the next block: the reader process for files, or this one, reading in
        turn (generators: their level can change at run time, which the reader process does not see)."""
        if self.reader is not None and not self.datasets[src.name].generator:
            reader = self.reader
            return (lambda start, stop: reader.read(j, start, stop)), (lambda start, stop: reader.ahead(j, start, stop))
        group_size, path = self.config.group_size, self.where[src.name]
        return (lambda start, stop: prompt_bodies(src, start, stop, group_size, path)), None

    def _topic(self, name: str) -> str:
        return f"{name}.{self.config.output_suffix}" if self.config.output_suffix else name

    def _states(self, topic: str) -> dict[str, events.SourceState]:
        while not self.stop.is_set():
            try:
                return load_states(self.config.bootstrap, topic, self.state_key)
            except (TimeoutError, ClientError) as exc:
                log.warning("reading `%s` failed, retrying: %s", topic, exc)
        return {}

    def _resume_state(self, records: dict[str, events.SourceState]) -> events.SourceState | None:
        state = records.get(self.state_key)
        if state is not None and state.config_digest != config_digest(self.config):
            log.warning("the state under %s was written for another config (seed, sources, block): starting over",
                        self.state_key)
            return None
        return state

    def _original_schedule(self) -> Schedule:
        """A replay draws under the original run's mixtures, each from the draw it took effect at."""
        records = self._states(SOURCE_STATE.name)
        prefix = history_key(self.state_key, 0)[:-8]
        base = Mixture.initial(self.mixture.weights, self.mixture.levels)
        versions = sorted((base.restored(r) for k, r in records.items() if k.startswith(prefix)),
                          key=lambda m: m.version)
        if versions:
            log.info("replaying under %s mixture version(s) of the original run", len(versions))
        return Schedule(versions)

    def _at_level(self, src):  # noqa: ANN001, ANN202 - a TaskSource
        """The source at the level the mixture holds for it: a generator at another level is reopened,
        its ids tagged with the level (another level's item i is another task)."""
        dataset = self.datasets[src.name]
        level = self.mixture.levels.get(src.name)
        if not dataset.generator or level == getattr(getattr(src, "cfg", None), "level", dataset.level):
            return src
        return open_source(dataset.model_copy(update={"level": level}), tag_level=level != dataset.level)

    def _interleave(self) -> Interleave:
        return Interleave(self.mixture.weight_list([c.name for c in self.cursors] or list(self.datasets)),
                          self.config.seed, self.mixture.version)

    def _apply(self, messages: list) -> None:
        for msg in messages:
            if isinstance(msg, events.PolicyVersion):
                self.lead.learner_batch(msg.batch_groups)
            elif isinstance(msg, events.Control) and msg.WhichOneof("command") == "set_mixture":
                if self.schedule is not None:
                    continue  # a replay follows the original run's mixtures, not today's commands
                if msg.header.trace.run_id not in ("", self.config.run_id):
                    continue  # another run's curriculum
                self._set_mixture(msg)
            elif isinstance(msg, events.Control) and msg.WhichOneof("command") == "set_window":
                if msg.set_window.max_new_tokens > self.window_tokens and self.window_tokens and self.filter is not None:
                    readmitted, retired = self.filter.window_stage()
                    log.info("output window %s -> %s: %s too-hard rows readmitted, %s easy rows retired",
                             self.window_tokens, msg.set_window.max_new_tokens, readmitted, retired)
                self.window_tokens = max(self.window_tokens, msg.set_window.max_new_tokens)

    def _set_mixture(self, msg: events.Control) -> None:
        """Apply one SetMixture from the next draw on, or refuse it with a metric saying why."""
        generators = {n for n, d in self.datasets.items() if d.generator}
        try:
            mixture = self.mixture.after(msg.set_mixture, self.draws, generators, msg.header.message_id)
        except MixtureRefused as exc:
            metrics.MIXTURE_REFUSED.labels(exc.code).inc()
            self.producer.send(METRICS, self.name, events.Metric(
                header=codec.header(self.name, run_id=self.config.run_id), service=self.name,
                name="source/mixture_refused", value=1.0, labels={"reason": exc.code, "why": str(exc),
                                                                  "command": msg.header.message_id}))
            log.warning("set_mixture %s refused: %s", msg.header.message_id, exc)
            return
        self._use(mixture)
        log.info("mixture v%s from draw %s (%s): weights %s, levels %s", mixture.version, mixture.from_draw,
                 mixture.stage or "no stage", mixture.weights, {n: v for n, v in mixture.levels.items() if v})

    def _use(self, mixture: Mixture) -> None:
        """Draw under `mixture` from now on; its state is on the broker before the first such draw
        (the batches in flight acknowledged and their states sent first)."""
        self.window.drain()
        self.mixture = mixture
        for j, cursor in enumerate(self.cursors):
            source = self._at_level(cursor.source)
            if source is not cursor.source:  # the block under it is generated again at the new level
                cursor.switch(source, *self._readers(j, source))
        self.interleave = self._interleave()
        state = self.state()
        self.producer.send(SOURCE_STATE, history_key(self.state_key, mixture.version), state)
        self.producer.send(SOURCE_STATE, self.state_key, state)
        self.producer.flush()
        self._report_mixture()

    def _report_mixture(self) -> None:
        metrics.MIXTURE_VERSION.set(self.mixture.version)
        for name, weight in self.mixture.weights.items():
            metrics.WEIGHT.labels(name).set(weight)
        for name, level in self.mixture.levels.items():
            metrics.LEVEL.labels(name).set(level or 0)

    # ---- publishing ----------------------------------------------------------------------
    def draw(self, n: int) -> tuple[list[Record], int, Counter]:
        """The next n draws as records (prompts and bad-row letters; fewer when every source is
        exhausted), how many are prompts, and the prompts per source."""
        records: list[Record] = []
        per_source: Counter = Counter()
        exhausted = self._exhausted()
        prompts_topic, stream = PROMPTS.name, self.state_key  # the producer suffixes
        choice, skip, judged, heldout = self.interleave.choice, self.skip, self.filter, self.heldout
        encode = self._envelope().draw  # one header a batch; ids per draw
        while len(records) < n:
            if self.schedule is not None and (due := self.schedule.due(self.draws, self.mixture.version)):
                if records:
                    break  # the batch ends where the next version starts: its state is written first
                self._use(due)
                choice, encode = self.interleave.choice, self._envelope().draw
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
            if judged is not None and judged.is_retired(cursor.name, row):
                metrics.RETIRED_SKIPS.labels(cursor.name).inc()
                exhausted[j] = exhausted[j] or judged.spent(cursor.name)
                continue
            if isinstance(item, Exception):  # a bad row, a record the prompt refuses, a broken read
                records.append(self._letter(item, cursor.name, row, epoch))
                continue
            prompt_id, body = item
            if heldout and prompt_key(events.Prompt.FromString(body)) in heldout:
                metrics.HELDOUT_DROPPED.labels(cursor.name).inc()  # an eval set's row: held out of training
                continue
            value = encode(message_id_for(stream, cursor.name, epoch, position), body, cursor.name, epoch, position, draw)
            records.append((prompts_topic, prompt_id, value))
            per_source[cursor.name] += 1
            if judged is not None:
                judged.drew(prompt_id, cursor.name, row)
        return records, sum(per_source.values()), per_source

    def _envelope(self) -> Envelope:
        """The framing of this batch's prompts: a fresh header, the mixture in force, the stream."""
        rest = events.SourceCursor(mixture_version=self.mixture.version, stream=self.state_key).SerializeToString()
        return Envelope(codec.header(self.name, run_id=self.config.run_id), rest)

    def _exhausted(self) -> list[bool]:
        """Per source: nothing left to draw (its epochs done, or every row retired by the filter)."""
        return [c.exhausted or bool(self.filter and self.filter.spent(c.name)) for c in self.cursors]

    def _letter(self, exc: Exception, source: str, row: int, epoch: int) -> Record:
        cfg = self.config
        letter = row_letter(exc, source, row, epoch, self.name, self.group_id, cfg.run_id)
        metrics.BAD_ROWS.labels(source, getattr(exc, "field", type(exc).__name__)).inc()
        log.warning("bad row skipped: %s", exc)
        return DLQ.name, letter.source_topic, codec.encode(letter)

    def state(self) -> events.SourceState:
        return self.mixture.to_state(events.SourceState(
            header=codec.header(self.name, run_id=self.config.run_id), draws=self.draws,
            cursors=[events.SourceCursor(source=c.name, epoch=c.epoch, position=c.position) for c in self.cursors],
            config_digest=config_digest(self.config)))

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

    def idle(self) -> bool:
        """No draw can be made: every source is exhausted (or retired) or has weight 0."""
        return self.interleave.choice(self.draws, self._exhausted()) is None

    def follow_scores(self) -> None:
        """Judge the groups scored since the last call; keep changed retired sets on `source_state`."""
        if self.filter is None or self.scored is None:
            return
        for group in self.scored.poll():
            kind = self.filter.scored(group)
            if group.prompt_id in self.filter.drawn:
                metrics.JUDGED.labels(self.filter.drawn[group.prompt_id][0], kind or "in_band").inc()
        saved = self.filter.records()
        for name, record in saved:
            record.header.CopyFrom(codec.header(self.name, run_id=self.config.run_id))
            self.producer.send(SOURCE_STATE, f"{self.state_key}/retired/{name}", record)
        if saved:
            for name, counts in self.filter.counts().items():
                for kind, count in counts.items():
                    metrics.RETIRED.labels(name, kind).set(count)

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
                self.follow_scores()
                self.lead.refresh()
                room = self.lead.room()
                n = self.config.publish_batch if room is None else min(room, self.config.publish_batch)
                published = self.publish(n) if n > 0 else self.window.settle()
            except (KafkaError, ClientError) as exc:  # the broker is away: the state is unchanged until a batch is acked
                log.warning("publishing failed, retrying: %s", exc)
                published, n = 0, 0
                self.stop.wait(1.0)
            if n > 0 and published == 0 and self.idle():
                done = all(self._exhausted())
                reason = "every source exhausted" if done else "every source left has weight 0"
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
        if self.filter is not None and getattr(self, "producer", None) is not None:
            for name, record in self.filter.records(force=True):  # the retirements since the last save
                self.producer.send(SOURCE_STATE, f"{self.state_key}/retired/{name}", record)
        for closer in (getattr(self, "producer", None), getattr(self, "watcher", None), getattr(self, "lead", None),
                       self.reader, self.scored):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # noqa: BLE001 - closing the rest matters more
                    log.warning("closing %s failed: %s", type(closer).__name__, exc)
