"""One sample's story, read back from the topics: the prompt (its source and row), its group's
rollouts, their verdicts, the group's advantages as the learner computes them, and whether the
learner trained it (in which step) or skipped it (and why), each record with its topic, partition
and offset.

The search is bounded so it answers in seconds on topics of millions of records:

* keys name partitions: a prompt lives on `prompts` at partition_for(prompt id), a group's
  rollouts and its ScoredGroup at partition_for(group id), the learner's metrics at
  partition_for("learner") (m1flow.bus.seek); no other partition is read;
* time names offsets: each stage is looked for only from a little before the previous stage's
  record (`slack_s`, for clocks) to `span_s` after it, through the broker's time index;
* the first record (the prompt, or the group's newest rollout when no prompt is found) is searched
  backwards from the end of its partition in growing chunks, or only around `around_ms` when a
  time is known (the monitor's page passes the group's);
* keys and raw bytes are compared before anything is decoded.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from m1flow.bus import codec
from m1flow.bus.seek import Found, PartitionReader, key_is, partition_for
from m1flow.bus.topics import METRICS, PROMPTS, ROLLOUTS, SCORED
from m1flow.contracts import events
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.legacy import upgrade
from m1flow.rl.selection import (GROUP_LABEL, GROUP_SKIPPED, GROUP_TRAINED, LEFT_OUT_LABEL, Selected, check_group,
                                 parse_left_out, select_group, unusable_reason)
from m1flow.status import status_of
from m1flow.trace.ids import Reading, group_id_for, readings

LEARNER_KEY = "learner"  # the learner's metrics are keyed by its service name
LOSS_METRIC = "learner/loss"
FINISH = {events.FINISH_REASON_STOP: "stop", events.FINISH_REASON_LENGTH: "length",
          events.FINISH_REASON_REPETITION: "repetition", events.FINISH_REASON_UNSPECIFIED: "unspecified"}


class TraceOptions(BaseModel):
    """How far the search looks, and what the learner's selection is configured with."""

    model_config = ConfigDict(extra="forbid")

    around_ms: int | None = Field(None, description="a time near the sample's records (epoch ms); None: search "
                                                    "back from the end of the first partition")
    span_s: float = Field(1800.0, gt=0, description="how long after one stage's record the next one's is looked for")
    slack_s: float = Field(60.0, ge=0, description="how long before a record the next stage's search starts (clocks)")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig,
                                       description="the run's `algorithm:` (the learner's), for the advantages")
    topics: dict[str, str] = Field(default_factory=dict,
                                   description="a live topic read under another name, e.g. scored -> scored.fix")
    learner_group: str = Field("m1flow-learner", description="the learner's consumer group (its position on scored)")

    def topic(self, live: str) -> str:
        return self.topics.get(live, live)


@dataclass
class Where:
    """Where a record lives."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int

    @property
    def position(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"

    @classmethod
    def of(cls, rec: Found) -> Where:
        return cls(rec.topic, rec.partition, rec.offset, rec.timestamp_ms)


@dataclass
class PromptPart:
    at: Where
    prompt_id: str
    message_id: str
    source: str
    domain: str
    row: str  # the row's id within its source (the dataset's `id`, else its index)
    task_type: str
    kind: str
    gold: str
    group_size: int
    text: str
    origin: dict[str, Any]  # where svc_source drew it: epoch, position, draw, mixture version ({} when fed)


@dataclass
class RolloutPart:
    at: Where
    rollout_id: str
    index: int
    policy_version: int
    length: int
    finish: str  # stop, length (hit the window) or repetition (truncated early)
    truncated: bool
    window: int
    engine: str
    text: str
    copies: int = 1  # records of this rollout found (a re-sent one shares its message id)


@dataclass
class Verdict:
    rollout_id: str
    index: int
    status: str
    correct: bool | None
    reward: float
    parts: dict[str, float]
    detail: str
    policy_version: int


@dataclass
class ScoredPart:
    at: Where
    kind: str
    incomplete: bool
    verdicts: list[Verdict]
    copies: list[str]  # positions of every ScoredGroup of this group found (scored twice after a crash: 2)


@dataclass
class SampleAdvantage:
    index: int
    rollout_id: str
    left_out: str | None  # why selection leaves it out (infra_failure, stale, empty), else None
    shaped_reward: float | None
    advantage: float | None


@dataclass
class AdvantagePart:
    estimator: str
    from_version: int  # the policy version staleness is measured against (the one the learner trained from)
    version_source: str  # how from_version was chosen
    outcome: str  # trainable, or skipped: <reason> (as selection decides it, recomputed here)
    samples: list[SampleAdvantage]


@dataclass
class LearnerPart:
    status: str  # trained, skipped, pending or unknown
    version: int | None = None  # trained: the version its step made; skipped: the version then current
    reason: str = ""
    left_out: dict[str, int] = field(default_factory=dict)
    samples_trained: int | None = None
    step_loss: float | None = None
    at: Where | None = None
    note: str = ""


@dataclass
class Story:
    query: str
    reading: str  # how the id was read: prompt, group or rollout
    prompt_id: str
    group_id: str | None
    prompt: PromptPart | None = None
    rollouts: list[RolloutPart] = field(default_factory=list)
    scored: ScoredPart | None = None
    advantages: AdvantagePart | None = None
    learner: LearnerPart | None = None
    notes: list[str] = field(default_factory=list)
    records_read: int = 0
    seconds: float = 0.0

    @property
    def found(self) -> bool:
        return self.prompt is not None or bool(self.rollouts) or self.scored is not None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON, each record's place also as one "position" string (topic/partition@offset)."""
        return _with_positions(asdict(self))


def _with_positions(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _with_positions(v) for k, v in value.items()}
        if {"topic", "partition", "offset"} <= out.keys():
            out["position"] = f"{out['topic']}/{out['partition']}@{out['offset']}"
        return out
    if isinstance(value, list):
        return [_with_positions(v) for v in value]
    return value


class Tracer:
    """The bounded search behind `m1flow trace` (one PartitionReader, one TraceOptions)."""

    def __init__(self, reader: PartitionReader, options: TraceOptions | None = None) -> None:
        self.reader = reader
        self.options = options or TraceOptions()

    def tell(self, query: str) -> Story:
        """The story of a prompt id, group id or rollout id, as far as the topics hold it."""
        started, read_before = time.monotonic(), self.reader.records_read
        story = self._story(query.strip())
        story.records_read = self.reader.records_read - read_before
        story.seconds = round(time.monotonic() - started, 3)
        return story

    # ---------------------------------------------------------------------------------- stages
    def _story(self, query: str) -> Story:
        options = readings(query)
        if not options:
            raise ValueError("an empty id: give a prompt id, group id or rollout id")
        for reading in options:  # the prompt record confirms a reading and roots the story
            try:
                found = self._prompt(reading)
            except PermissionError as exc:  # e.g. the monitor's principal reads no `prompts`
                story = self._without_prompt(query, [r for r in options if r.group_id is not None])
                story.notes.append(f"prompt not read: {exc}")
                break
            if found is not None:
                rec, prompt = found
                story = Story(query, reading.kind, prompt.prompt_id, group_id_for(prompt.prompt_id,
                                                                                  prompt.header.message_id))
                story.prompt = _prompt_part(rec, prompt)
                self._rollouts_after(story, rec.timestamp_ms, prompt.group_size)
                break
        else:
            story = self._without_prompt(query, [r for r in options if r.group_id is not None])
        group = self._scored(story)
        if group is not None:
            self._learner(story)
            self._advantages(story, group)
        return story

    def _prompt(self, reading: Reading) -> tuple[Found, events.Prompt] | None:
        topic = self.options.topic(PROMPTS.name)
        count = self.reader.partitions(topic)
        if not count:
            return None
        part = partition_for(reading.prompt_id, count)
        want = reading.prompt_id.encode()

        def match(key: bytes | None, value: bytes | None) -> bool:
            if key != want:
                return False
            if reading.tag is None:
                return True
            try:
                prompt = codec.decode(value, events.Prompt)
            except codec.CodecError:
                return False
            return prompt.header.message_id[:len(reading.tag)] == reading.tag

        start, stop = self._first_window(topic, part, after_s=self.options.slack_s)
        rec = self.reader.newest(topic, part, match, start, stop)
        if rec is None:
            return None
        return rec, codec.decode(rec.value, events.Prompt)

    def _first_window(self, topic: str, part: int, after_s: float) -> tuple[int | None, int | None]:
        """Where the first record is searched: around `around_ms` when known, else the whole partition."""
        around = self.options.around_ms
        if around is None:
            return None, None
        return self.reader.span(topic, part, around - int(self.options.span_s * 1000), around + int(after_s * 1000))

    def _rollouts_after(self, story: Story, ts_ms: int, group_size: int) -> None:
        """The group's rollouts, from a little before the prompt to span_s after it."""
        topic = self.options.topic(ROLLOUTS.name)
        count = self.reader.partitions(topic)
        if not count or story.group_id is None:
            return
        part = partition_for(story.group_id, count)
        start, stop = self._after(topic, part, ts_ms)
        self._collect_rollouts(story, topic, part, start, stop, group_size)
        if not story.rollouts:
            story.notes.append(f"no rollout of {story.group_id} on {topic}/{part} within {self.options.span_s:.0f}s "
                               "after the prompt: not sampled yet, or later (--span)")

    def _after(self, topic: str, part: int, ts_ms: int) -> tuple[int, int]:
        return self.reader.span(topic, part, ts_ms - int(self.options.slack_s * 1000),
                                ts_ms + int(self.options.span_s * 1000))

    def _collect_rollouts(self, story: Story, topic: str, part: int, start: int, stop: int, group_size: int) -> None:
        by_id: dict[str, RolloutPart] = {}
        for rec in self.reader.scan(topic, part, start, stop, key_is(story.group_id or "")):
            try:
                rollout = codec.decode(rec.value, events.Rollout)
            except codec.CodecError as exc:
                story.notes.append(f"{rec.position}: undecodable rollout: {exc}")
                continue
            if rollout.rollout_id in by_id:
                by_id[rollout.rollout_id].copies += 1
                continue
            by_id[rollout.rollout_id] = _rollout_part(rec, rollout)
            group_size = group_size or rollout.group_size
            if group_size and len(by_id) >= group_size:
                break
        story.rollouts = sorted(by_id.values(), key=lambda r: r.index)

    def _without_prompt(self, query: str, groups: list[Reading]) -> Story:
        """No prompt record confirms the id (fed straight to `rollouts`, or past retention): look for
        the group's rollouts by key, newest first."""
        topic = self.options.topic(ROLLOUTS.name)
        count = self.reader.partitions(topic)
        for reading in groups:
            gid = reading.group_id or ""
            story = Story(query, reading.kind, reading.prompt_id, gid,
                          notes=[f"no prompt {reading.prompt_id!r} of this group on {self.options.topic(PROMPTS.name)}"])
            if not count:
                continue
            part = partition_for(gid, count)
            start, stop = self._first_window(topic, part, after_s=self.options.span_s)
            newest = self.reader.newest(topic, part, key_is(gid), start, stop)
            if newest is not None:
                begin = self.reader.offset_at(topic, part, newest.timestamp_ms - int(self.options.slack_s * 1000))
                self._collect_rollouts(story, topic, part, begin, newest.offset + 1, 0)
                return story
        # last, the group on `scored` alone (its rollouts past retention; or, for an id of no known form,
        # the id itself: groups written there by hand or by an older producer need not follow the format)
        reading = groups[0] if groups else Reading("group", query)
        gid = reading.group_id or query
        return Story(query, reading.kind, reading.prompt_id, gid,
                     notes=[f"no prompt and no rollout of {gid!r} found; looked for it on scored"])

    def _scored(self, story: Story) -> events.ScoredGroup | None:
        """The group's ScoredGroup (every copy), from a little before its rollouts to span_s after
        them; without rollouts, searched by key like the first record."""
        if story.group_id is None or (story.prompt is not None and not story.rollouts):
            return None
        topic = self.options.topic(SCORED.name)
        count = self.reader.partitions(topic)
        if not count:
            return None
        part = partition_for(story.group_id, count)
        if story.rollouts:
            last = max(r.at.timestamp_ms for r in story.rollouts)
            start, stop = self._after(topic, part, min(r.at.timestamp_ms for r in story.rollouts))
            stop = max(stop, self._after(topic, part, last)[1])
            found = list(self._first_and_copies(topic, part, start, stop, key_is(story.group_id)))
        else:
            start, stop = self._first_window(topic, part, after_s=self.options.span_s)
            newest = self.reader.newest(topic, part, key_is(story.group_id), start, stop)
            found = [newest] if newest is not None else []
        if not found:
            if story.rollouts:
                story.notes.append(f"no ScoredGroup of {story.group_id} on {topic}/{part} within "
                                   f"{self.options.span_s:.0f}s after its rollouts: not scored yet, or later (--span)")
            return None
        try:
            group = codec.decode(found[0].value, events.ScoredGroup)
        except codec.CodecError as exc:
            story.notes.append(f"{found[0].position}: undecodable ScoredGroup: {exc}")
            return None
        story.scored = _scored_part(found[0], group, [rec.position for rec in found])
        return group

    def _first_and_copies(self, topic: str, part: int, start: int, stop: int, match: Any) -> Iterator[Found]:
        """The first match, then any other within slack_s of it (a group scored twice after a crash)."""
        first: Found | None = None
        for rec in self.reader.read(topic, part, start, stop):
            if first is not None and rec.timestamp_ms > first.timestamp_ms + int(self.options.slack_s * 1000):
                return
            if match(rec.key, rec.value):
                first = first or rec
                yield rec

    def _learner(self, story: Story) -> None:
        """What the learner did with the group: its per-group metric, else its position on `scored`."""
        assert story.scored is not None and story.group_id is not None
        topic = self.options.topic(METRICS.name)
        count = self.reader.partitions(topic)
        gid = story.group_id.encode()
        losses: dict[int, float] = {}
        if count:
            part = partition_for(LEARNER_KEY, count)
            start, stop = self._after(topic, part, story.scored.at.timestamp_ms)
            wanted = (gid, LOSS_METRIC.encode())
            for rec in self.reader.scan(topic, part, start, stop,
                                        lambda k, v: k == LEARNER_KEY.encode() and any(w in (v or b"") for w in wanted)):
                metric = codec.decode(rec.value, events.Metric)
                if metric.name == LOSS_METRIC:
                    losses[metric.step] = metric.value
                elif metric.labels.get(GROUP_LABEL) == story.group_id and metric.name in (GROUP_TRAINED, GROUP_SKIPPED):
                    story.learner = _learner_part(rec, metric, losses)
                    return
        story.learner = self._position(story)

    def _position(self, story: Story) -> LearnerPart:
        """No metric names the group: say where the learner's group stands on `scored`."""
        assert story.scored is not None
        at = story.scored.at
        committed = self.reader.committed(self.options.learner_group, at.topic, at.partition)
        if committed is None or committed <= at.offset:
            where = "has committed nothing there" if committed is None else f"has committed up to offset {committed}"
            return LearnerPart("pending", note=f"not trained yet: the learner ({self.options.learner_group}) {where} "
                                               f"on {at.topic}/{at.partition}, this group is at {at.offset} "
                                               "(in a batch still filling, or not read yet)")
        return LearnerPart("unknown", note=f"read by the learner (committed {committed} > {at.offset}) but no "
                                           f"{GROUP_TRAINED} or {GROUP_SKIPPED} of it within {self.options.span_s:.0f}s "
                                           "after it was scored: a learner older than those metrics, or later (--span)")

    def _advantages(self, story: Story, group: events.ScoredGroup) -> None:
        learner = story.learner
        if learner is not None and learner.status == "trained" and learner.version is not None:
            version, how = learner.version - 1, f"the learner trained it from v{learner.version - 1}"
        elif learner is not None and learner.status == "skipped" and learner.version is not None:
            version, how = learner.version, f"the learner skipped it at v{learner.version}"
        else:
            version = max((s.policy_version for s in group.samples), default=0)
            how = "no learner step known: the newest version among its samples"
        try:
            story.advantages = advantage_part(group, self.options.algorithm, version, how)
        except ValueError as exc:  # not a whole group: the learner dead-letters it
            story.notes.append(f"advantages: {exc}")


# ------------------------------------------------------------------------------- the parts
def _prompt_part(rec: Found, prompt: events.Prompt) -> PromptPart:
    source = prompt.source or prompt.task_type
    prefix = f"{prompt.source}/"
    row = prompt.prompt_id[len(prefix):] if prompt.source and prompt.prompt_id.startswith(prefix) else ""
    origin = codec.to_json(prompt.origin) if prompt.HasField("origin") else {}
    return PromptPart(Where.of(rec), prompt.prompt_id, prompt.header.message_id, source, prompt.domain, row,
                      prompt.task_type, prompt.verifier.kind, prompt.verifier.gold, prompt.group_size, prompt.text,
                      origin)


def _rollout_part(rec: Found, r: events.Rollout) -> RolloutPart:
    finish = FINISH.get(r.finish_reason, str(r.finish_reason))
    return RolloutPart(Where.of(rec), r.rollout_id, r.index, r.policy_version, len(r.token_ids), finish,
                       finish in ("length", "repetition"), r.max_new_tokens, r.engine, r.response_text)


def _scored_part(rec: Found, group: events.ScoredGroup, copies: list[str]) -> ScoredPart:
    verdicts = [Verdict(s.rollout_id, s.index, status_of(s).name, s.correct if s.HasField("correct") else None,
                        round(s.reward, 6), {k: round(v, 6) for k, v in codec.to_json(s.parts).items()},
                        s.detail, s.policy_version) for s in group.samples]
    return ScoredPart(Where.of(rec), group.verifier_kind or group.task_type, group.incomplete,
                      sorted(verdicts, key=lambda v: v.index), copies)


def _learner_part(rec: Found, metric: events.Metric, losses: dict[int, float]) -> LearnerPart:
    left_out = parse_left_out(metric.labels.get(LEFT_OUT_LABEL, ""))
    if metric.name == GROUP_TRAINED:
        return LearnerPart("trained", version=metric.step, samples_trained=int(metric.value), left_out=left_out,
                           step_loss=losses.get(metric.step), at=Where.of(rec))
    return LearnerPart("skipped", version=metric.step, reason=metric.labels.get("reason", ""), left_out=left_out,
                       at=Where.of(rec))


def advantage_part(group: events.ScoredGroup, cfg: AlgorithmConfig, version: int, how: str) -> AdvantagePart:
    """The group's shaped rewards and advantages as the learner's selection computes them at `version`
    (m1flow.rl: the same functions, the run's algorithm config), and its verdict on the group."""
    copy = events.ScoredGroup()
    copy.CopyFrom(group)
    copy = upgrade(copy)
    check_group(copy)
    verdict = cfg.select(copy, version)
    outcome = "trainable" if isinstance(verdict, Selected) else f"skipped: {verdict.reason}"
    full = select_group(copy, version, estimator=cfg.advantage, max_staleness=cfg.max_staleness,
                        dynamic_sampling=False, shaping=cfg.shaping)  # the rewards even of a skipped group
    kept = dict(zip(full.samples, zip(full.rewards, full.advantages))) if isinstance(full, Selected) else {}
    rows = []
    for i, s in enumerate(copy.samples):
        reward, adv = kept.get(i, (None, None))
        rows.append(SampleAdvantage(s.index, s.rollout_id, unusable_reason(s, version, cfg.max_staleness),
                                    None if reward is None else round(reward, 6), None if adv is None else round(adv, 6)))
    return AdvantagePart(cfg.advantage, version, how, outcome, sorted(rows, key=lambda r: r.index))
