"""The sequence of draws: which source's row draw d takes (the seeded interleave under the mixture in
force, then that source's cursor) and what it becomes (a framed prompt, or a bad row's dead letter).

The sequence is a pure function of the config: a replay, a restart from the state and a run that never
stopped draw the same rows in the same order. What the state does not hold is skipped, not redrawn:
`skip` holds the draws a restart found already on `prompts` (svc_source.state.published_since). A
prompt the bus refuses (too large, invalid) is a bad row found late: `refused` makes its dead letter,
counted as the bad rows are.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from m1flow.bus import codec
from m1flow.bus.producer import RecordRefused
from m1flow.bus.topics import DLQ, PROMPTS
from m1flow.contracts import events
from m1flow.heldout import prompt_key
from m1flow.prompt_wire import Envelope
from m1flow.source import BadRow, message_id_for, row_letter
from svc_source import metrics
from svc_source.cursor import Cursor
from svc_source.filter import DifficultyFilter
from svc_source.mixture import Mixture, Schedule
from svc_source.order import Interleave
from svc_source.sources import Sources
from svc_source.window import Origin, Record

log = logging.getLogger(__name__)


class Draws:
    """The cursors, the draw count and the mixture in force; `draw(n)` makes the next n records."""

    def __init__(self, sources: Sources, stream: str, group_id: str, mixture: Mixture,
                 state: events.SourceState | None) -> None:
        cfg = sources.config
        self.sources, self.stream, self.group_id = sources, stream, group_id
        self.seed, self.run_id = cfg.seed, cfg.run_id
        self.mixture = mixture
        self.draws = state.draws if state else 0
        self.skip: set[int] = set()  # draws already on `prompts` past the state (a batch a kill cut)
        self.schedule: Schedule | None = None  # a replay's mixtures, from the original run's state
        self.filter: DifficultyFilter | None = None  # the online difficulty filter, when enabled
        at = {c.source: c for c in state.cursors} if state else {}
        opened = [sources.at_level(src, mixture.levels) for src in sources.opened]
        self.cursors = [Cursor(src, cfg.seed, cfg.block_rows, cfg.max_epochs,
                               at[src.name].epoch if src.name in at else 0,
                               at[src.name].position if src.name in at else 0,
                               *sources.readers(j, src)) for j, src in enumerate(opened)]
        self.interleave = self._interleave()

    def _interleave(self) -> Interleave:
        names = [c.name for c in self.cursors] or list(self.sources.datasets)
        return Interleave(self.mixture.weight_list(names), self.seed, self.mixture.version)

    def switch(self, mixture: Mixture) -> None:
        """Draw under `mixture` from the next draw: generators at a new level are reopened under their cursors."""
        self.mixture = mixture
        for j, cursor in enumerate(self.cursors):
            source = self.sources.at_level(cursor.source, mixture.levels)
            if source is not cursor.source:  # the block under it is generated again at the new level
                cursor.switch(source, *self.sources.readers(j, source))
        self.interleave = self._interleave()

    def draw(self, n: int, use: Callable[[Mixture], None]) -> tuple[list[Record], list[Origin | None], Counter]:
        """The next n draws as records (prompts and bad-row letters; fewer when every source is
        exhausted), where each prompt was drawn (None for a letter), and the prompts per source. A
        replay's next mixture version ends the batch where it starts: `use` writes its state before
        the first draw under it."""
        records: list[Record] = []
        origins: list[Origin | None] = []
        per_source: Counter = Counter()
        exhausted = self.exhausted()
        encode = self._envelope().draw  # one header a batch; ids per draw
        while len(records) < n:
            if self.schedule is not None and (due := self.schedule.due(self.draws, self.mixture.version)):
                if records:
                    break
                use(due)
                encode = self._envelope().draw
            j = self.interleave.choice(self.draws, exhausted)
            if j is None:
                break
            taken = self._take(j, exhausted, encode)
            if taken is not None:
                records.append(taken[0])
                origins.append(taken[1])
                if taken[1] is not None:
                    per_source[self.cursors[j].name] += 1
        return records, origins, per_source

    def _take(self, j: int, exhausted: list[bool], encode: Callable[..., bytes]) -> tuple[Record, Origin | None] | None:
        """Draw d from cursor j: its prompt and where it was drawn, or its letter (and None), or None
        for a draw skipped (published before a restart, a row the filter retired, or a row of one of
        the run's eval sets: held out)."""
        cursor, draw, judged = self.cursors[j], self.draws, self.filter
        self.draws += 1
        if draw in self.skip:  # published before the restart, past the state record
            cursor.skip()
            self.skip.discard(draw)
            exhausted[j] = cursor.exhausted
            return None
        epoch, position, row, item = cursor.draw()
        exhausted[j] = cursor.exhausted
        if judged is not None and judged.is_retired(cursor.name, row):
            metrics.RETIRED_SKIPS.labels(cursor.name).inc()
            exhausted[j] = exhausted[j] or judged.spent(cursor.name)
            return None
        if isinstance(item, Exception):  # a bad row, a record the prompt refuses, a broken read
            return self._letter(item, cursor.name, row, epoch, getattr(item, "field", type(item).__name__)), None
        prompt_id, body = item
        if self.sources.heldout and prompt_key(events.Prompt.FromString(body)) in self.sources.heldout:
            metrics.HELDOUT_DROPPED.labels(cursor.name).inc()  # an eval set's row: held out of training
            return None
        value = encode(message_id_for(self.stream, cursor.name, epoch, position), body, cursor.name, epoch, position,
                       draw)
        if judged is not None:
            judged.drew(prompt_id, cursor.name, row)
        return (PROMPTS.name, prompt_id, value), (cursor.name, row, epoch)  # the producer suffixes the topic

    def _envelope(self) -> Envelope:
        """The framing of this batch's prompts: a fresh header, the mixture in force, the stream."""
        rest = events.SourceCursor(mixture_version=self.mixture.version, stream=self.stream).SerializeToString()
        return Envelope(codec.header("source", run_id=self.run_id), rest)

    def _letter(self, exc: Exception, source: str, row: int, epoch: int, reason: str) -> Record:
        letter = row_letter(exc, source, row, epoch, "source", self.group_id, self.run_id)
        metrics.BAD_ROWS.labels(source, reason).inc()
        log.warning("bad row skipped: %s", exc)
        return DLQ.name, letter.source_topic, codec.encode(letter)

    def refused(self, origin: Origin, error: RecordRefused) -> Record:
        """The dead letter of a prompt the bus refused for what it is: its file, row and the bus's
        reason, under the bad row's id, counted with the bad rows (reason: the refusal's code)."""
        source, row, epoch = origin
        bad = BadRow(self.sources.where.get(source, source), row, "prompt", f"refused by the bus: {error.reason}")
        return self._letter(bad, source, row, epoch, error.code)

    def exhausted(self) -> list[bool]:
        """Per source: nothing left to draw (its epochs done, or every row retired by the filter)."""
        return [c.exhausted or bool(self.filter and self.filter.spent(c.name)) for c in self.cursors]

    def idle(self) -> bool:
        """No draw can be made: every source is exhausted (or retired) or has weight 0."""
        return self.interleave.choice(self.draws, self.exhausted()) is None

    def state(self, digest: str) -> events.SourceState:
        """The position as a state record: draws, each source's epoch and position, the mixture."""
        return self.mixture.to_state(events.SourceState(
            header=codec.header("source", run_id=self.run_id), draws=self.draws,
            cursors=[events.SourceCursor(source=c.name, epoch=c.epoch, position=c.position) for c in self.cursors],
            config_digest=digest))
