"""`m1flow diff` and `m1flow replay --compare`: read a replay's output and the original records it
matches (ops/compare.py says what is compared), print the summary and the records that differ.

The replay's output topic (`<topic>.<group>`) is small and read whole; the original is read only on
the partitions its keys live on (m1flow.bus.seek.partition_for), from the replayed range's start
time on, and only until every replayed record has found its original. Exit status: 0 when nothing
differs, 1 when something does, 2 for errors.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from typing import Any

from google.protobuf.message import Message

from m1flow.bus import codec
from m1flow.bus.seek import Found, PartitionReader, partition_for
from m1flow.bus.topics import live_topic, spec
from m1flow.contracts import events
from ops.compare import (LOGPROB_TOL, LOSS_TOL, REWARD_TOL, LearnerDiff, RolloutDiff, Step, VerdictDiff,
                         compare_learner, compare_rollouts, compare_verdicts)
from ops.topics_io import parse_position

Diff = VerdictDiff | RolloutDiff | LearnerDiff
LEARNER_KEY = b"learner"
LOSS = "learner/loss"
SLACK_MS = 60_000  # originals are read from this long before the range's start (clocks)
COMPARED = {"scored": "verdicts (reward replay)", "rollouts": "samples (rollout replay)",
            "policy": "steps (learner replay)"}


def add_parser(sub: argparse._SubParsersAction, bootstrap: Callable[[argparse.Namespace], str]) -> None:
    d = sub.add_parser("diff", help="what a replay changed: its output matched with the original records by trace "
                                    "(exit 0: nothing differs, 1: something does)")
    d.add_argument("--original", required=True, help="the original topic: scored, rollouts or policy")
    d.add_argument("--replayed", required=True, help="the replay's output, e.g. scored.reward-replay-1")
    d.add_argument("--since", help="the replayed range's start (ISO time or ms:<epoch ms>): originals are read "
                                   "from there (default: the beginning)")
    add_compare_flags(d)
    d.set_defaults(func=lambda args: cmd_diff(args, bootstrap(args)))


def add_compare_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="the comparison as JSON")
    p.add_argument("--tolerance", type=float, default=None,
                   help=f"how far numbers may differ: reward {REWARD_TOL}, log-prob {LOGPROB_TOL}, relative loss "
                        f"{LOSS_TOL} by default")


def cmd_diff(args: argparse.Namespace, bootstrap: str) -> int:
    since = parse_position(args.since) if args.since else None
    if since is not None and since[0] != "time":
        raise ValueError(f"--since takes a time (ISO or ms:<epoch ms>), not an offset: {args.since!r}")
    with PartitionReader(bootstrap, client_id="m1flow-diff") as reader:
        diff = diff_topics(reader, args.original, args.replayed, since[1] if since else None, args.tolerance)
    return report(diff, args.json)


def report(diff: Diff, as_json: bool) -> int:
    print(json.dumps(diff.to_json(), indent=2, sort_keys=True) if as_json else "\n".join(diff.lines()))
    return 1 if diff.differs else 0


def diff_topics(reader: PartitionReader, original: str, replayed: str, since_ms: int | None,
                tolerance: float | None = None) -> Diff:
    """The comparison of a replay's output topic with the original, by the kind of topic."""
    live = live_topic(original)
    if live_topic(replayed) != live:
        raise ValueError(f"--original {original} and --replayed {replayed} are copies of different topics")
    if live not in COMPARED:
        raise ValueError(f"cannot compare {live!r} records; a replay's outputs are compared on "
                         + ", ".join(f"{t} ({what})" for t, what in COMPARED.items()))
    for name in (original, replayed):
        if not reader.partitions(name):
            raise ValueError(f"topic {name!r} does not exist")
    if live == "scored":
        again = _firsts(reader, replayed, events.ScoredGroup, lambda m: m.group_id)
        first = _originals(reader, original, events.ScoredGroup, set(again), since_ms, lambda m: m.group_id)
        return compare_verdicts(first, again, REWARD_TOL if tolerance is None else tolerance)
    if live == "rollouts":
        again = _firsts(reader, replayed, events.Rollout, lambda m: m.rollout_id)
        wanted = {r.group_id: set() for r in again.values()}
        for r in again.values():
            wanted[r.group_id].add(r.rollout_id)
        first = _rollout_originals(reader, original, wanted, since_ms)
        return compare_rollouts(first, again, LOGPROB_TOL if tolerance is None else tolerance)
    suffix = replayed[len(live) + 1:]
    original_suffix = original[len(live) + 1:]
    again_steps = learner_steps(reader, replayed, _named("metrics", suffix), None, None)
    first_steps = learner_steps(reader, original, _named("metrics", original_suffix), since_ms, set(again_steps))
    return compare_learner(first_steps, again_steps, LOSS_TOL if tolerance is None else tolerance)


def _named(live: str, suffix: str) -> str:
    return f"{live}.{suffix}" if suffix else live


# ------------------------------------------------------------------------------- reading
def _decoded(records: Iterator[Found], message_type: type[Message]) -> Iterator[tuple[Found, Any]]:
    for rec in records:
        try:
            yield rec, codec.decode(rec.value, message_type)
        except codec.CodecError:
            continue  # an undecodable record was dead-lettered by its consumer: nothing to compare


def _whole(reader: PartitionReader, topic: str) -> Iterator[Found]:
    for part in range(reader.partitions(topic)):
        low, high = reader.watermarks(topic, part)
        yield from reader.read(topic, part, low, high)


def _firsts(reader: PartitionReader, topic: str, message_type: type[Message], key: Callable[[Any], str]) -> dict:
    """A replay's whole output, the first record per id (a replayed record re-sent keeps its id)."""
    out: dict[str, Any] = {}
    for _, message in _decoded(_whole(reader, topic), message_type):
        out.setdefault(key(message), message)
    return out


def _start(reader: PartitionReader, topic: str, part: int, since_ms: int | None) -> tuple[int, int]:
    low, high = reader.watermarks(topic, part)
    if since_ms is None:
        return low, high
    return max(low, reader.offset_at(topic, part, since_ms - SLACK_MS)), high


def _originals(reader: PartitionReader, topic: str, message_type: type[Message], keys: set[str],
               since_ms: int | None, key_of: Callable[[Any], str]) -> dict:
    """The first original record of each key, read only on the partitions the keys live on, from
    since_ms on, until every key has one."""
    count = reader.partitions(topic)
    by_part: dict[int, set[str]] = {}
    for key in keys:
        by_part.setdefault(partition_for(key, count), set()).add(key)
    out: dict[str, Any] = {}
    for part, wanted in sorted(by_part.items()):
        raw = {k.encode() for k in wanted}
        start, stop = _start(reader, topic, part, since_ms)
        records = reader.scan(topic, part, start, stop, lambda k, _v: k in raw)
        for _, message in _decoded(records, message_type):
            out.setdefault(key_of(message), message)
            if wanted <= out.keys():
                break
    return out


def _rollout_originals(reader: PartitionReader, topic: str, wanted: dict[str, set[str]],
                       since_ms: int | None) -> dict[str, events.Rollout]:
    """The original rollouts of the replayed ones (keyed by group id, matched by rollout id)."""
    count = reader.partitions(topic)
    out: dict[str, events.Rollout] = {}
    by_part: dict[int, set[str]] = {}
    for gid in wanted:
        by_part.setdefault(partition_for(gid, count), set()).add(gid)
    for part, groups in sorted(by_part.items()):
        rids = set().union(*(wanted[g] for g in groups))
        raw = {g.encode() for g in groups}
        start, stop = _start(reader, topic, part, since_ms)
        for _, rollout in _decoded(reader.scan(topic, part, start, stop, lambda k, _v: k in raw), events.Rollout):
            if rollout.rollout_id in rids:
                out.setdefault(rollout.rollout_id, rollout)
            if rids <= out.keys():
                break
    return out


def learner_steps(reader: PartitionReader, policy_topic: str, metrics_topic: str, since_ms: int | None,
                  versions: set[int] | None) -> dict[int, Step]:
    """Per policy version, the step's loss (`learner/loss` on metrics, else the announcement's stats)
    and the weights' SHA-256 (the announcement, while compaction keeps it). versions: only these."""
    shas: dict[int, str] = {}
    losses: dict[int, float] = {}
    for _, policy in _decoded(_whole(reader, policy_topic), events.PolicyVersion):
        shas[policy.version] = policy.sha256
        if "loss" in policy.stats:
            losses.setdefault(policy.version, policy.stats["loss"])
    count = reader.partitions(metrics_topic)
    if count:
        part = partition_for(LEARNER_KEY, count)
        start, stop = _start(reader, metrics_topic, part, since_ms)
        wanted = LOSS.encode()
        records = reader.scan(metrics_topic, part, start, stop, lambda k, v: k == LEARNER_KEY and wanted in (v or b""))
        for _, metric in _decoded(records, events.Metric):
            if metric.name == LOSS:
                losses[metric.step] = metric.value
    found = set(shas) | set(losses)
    return {v: Step(v, losses.get(v), shas.get(v)) for v in sorted(found) if versions is None or v in versions}


# ------------------------------------------------------------------------------- replay --compare
def range_start_ms(reader: PartitionReader, topic: str, start: str) -> int | None:
    """The time a replayed range starts at: the time given, or the earliest timestamp of the
    records at the start offset (one record read per partition)."""
    kind, value = parse_position(start)
    if kind == "time":
        return value
    stamps = []
    for part in range(reader.partitions(topic)):
        low, high = reader.watermarks(topic, part)
        at = max(low, min(value, high))
        stamps += [rec.timestamp_ms for rec in reader.read(topic, part, at, min(at + 1, high))]
    return min(stamps) if stamps else None


def compare_replay(bootstrap: str, service: str, input_topic: str, start: str, suffix: str,
                   tolerance: float | None) -> Diff:
    """After a replay of `service` over input_topic from `start` into '<topic>.<suffix>': its output
    against the live run's."""
    output = {"reward": "scored", "rollout": "rollouts", "learner": "policy"}.get(service)
    if output is None:
        raise ValueError(f"--compare knows the outputs of reward, rollout and learner replays, not {service!r}")
    spec(input_topic)
    with PartitionReader(bootstrap, client_id="m1flow-diff") as reader:
        since = range_start_ms(reader, input_topic, start)
        return diff_topics(reader, output, f"{output}.{suffix}", since, tolerance)

