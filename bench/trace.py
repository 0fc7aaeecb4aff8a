"""`m1flow trace` on large topics, against reading them whole, in the same run on the same broker.

Why: a trace must answer in seconds on a run of millions of records, which it does by reading only
the partitions the ids imply and only the time range around each record (m1flow/trace/story.py).

The topics are those of a long run, written into a real local broker: `--groups` groups (default
250,000), each a Prompt on `prompts`, its 4 Rollouts on `rollouts` (1,000,000 small records), its
ScoredGroup on `scored` and the learner's `learner/group_trained` metric on `metrics`. Their
timestamps are set at publish time (CreateTime) spread over `--days` (default 3) ending now, as a
run of one group a second would leave them: time ranges then mean what they mean in a real run.

Sides, each timed (wall clock) for a group near the end and one in the middle:

  trace:           `m1flow trace <group id>` as the CLI runs it (Tracer over PartitionReader): the
                   prompt searched back from the end of its partition, the rest by time
  trace --around:  the same with the time known (the monitor's page passes the group's)
  full scan:       every record of the four topics read with the same reader (librdkafka) and its
                   key compared, nothing decoded: the least any reader that does not seek can do
  dump:            `m1flow topics dump --topic rollouts` (kafka-python, every record decoded), the
                   README's way before this tool, on the largest topic only (`--dump-limit` records)

Run: PYTHONPATH=. python bench/trace.py [--groups 250000] [--days 3] [--bootstrap HOST:PORT]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from m1flow.bus import codec  # noqa: E402
from m1flow.bus.admin import ensure_topics  # noqa: E402
from m1flow.bus.seek import PartitionReader  # noqa: E402
from m1flow.bus.topics import METRICS, PROMPTS, ROLLOUTS, SCORED  # noqa: E402
from m1flow.contracts import events  # noqa: E402
from m1flow.rl.selection import GROUP_LABEL, GROUP_TRAINED, LEFT_OUT_LABEL  # noqa: E402
from m1flow.status import Status  # noqa: E402
from m1flow.trace.ids import group_id_for, rollout_id_for  # noqa: E402
from m1flow.trace.story import Tracer, TraceOptions  # noqa: E402

GROUP = 4
TOPICS = (PROMPTS.name, ROLLOUTS.name, SCORED.name, METRICS.name)


def group_records(g: int, ts_ms: int) -> list[tuple[str, str, bytes, int]]:
    """(topic, key, value, timestamp) of group g: its prompt, rollouts, scored group, learner metric."""
    pid = f"bench/{g}"
    prompt = events.Prompt(header=codec.header("source", message_id=f"{g:08x}{'0' * 24}"), prompt_id=pid,
                           task_type="arith", text=f"{g % 97}+{g % 89}=", group_size=GROUP, source="bench",
                           verifier=events.VerifierSpec(kind="arith", gold=str(g % 97 + g % 89)))
    gid = group_id_for(pid, prompt.header.message_id)
    out = [(PROMPTS.name, pid, codec.encode(prompt), ts_ms)]
    scored = events.ScoredGroup(header=codec.header("reward"), group_id=gid, prompt_id=pid, task_type="arith",
                                group_size=GROUP, verifier_kind="arith", source="bench")
    for i in range(GROUP):
        rid = rollout_id_for(gid, i)
        tokens = [10 + i, 11, 12]
        rollout = events.Rollout(header=codec.header("rollout", group_id=gid, rollout_id=rid), rollout_id=rid,
                                 group_id=gid, prompt_id=pid, index=i, group_size=GROUP, task_type="arith",
                                 prompt_token_ids=[1, 2, 3], token_ids=tokens, logprobs=[-0.5] * 3,
                                 response_text=str(i), finish_reason=events.FINISH_REASON_STOP,
                                 verifier=prompt.verifier)
        out.append((ROLLOUTS.name, gid, codec.encode(rollout), ts_ms + 500))
        scored.samples.add(rollout_id=rid, index=i, reward=float(i % 2), correct=bool(i % 2), status=Status.OK,
                           prompt_token_ids=[1, 2, 3], token_ids=tokens, logprobs=[-0.5] * 3, detail="")
    out.append((SCORED.name, gid, codec.encode(scored), ts_ms + 1000))
    metric = events.Metric(header=codec.header("learner"), service="learner", name=GROUP_TRAINED, value=GROUP,
                           step=g // 16 + 1, labels={GROUP_LABEL: gid, LEFT_OUT_LABEL: ""})
    out.append((METRICS.name, "learner", codec.encode(metric), ts_ms + 1500))
    return out


def publish(bootstrap: str, groups: int, days: float, end: int) -> tuple[int, float]:
    """Every group's records, timestamps spread over `days` ending at `end`; (records, seconds)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "partitioner": "murmur2_random"})
    step = days * 86_400_000 / groups
    started, sent = time.monotonic(), 0
    for g in range(groups):
        for topic, key, value, ts in group_records(g, int(end - (groups - g) * step)):
            while True:
                try:
                    producer.produce(topic, value=value, key=key, timestamp=ts)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        if g % 1000 == 0:
            producer.poll(0)
            if g % 50_000 == 0:
                print(f"  published {g} groups ({sent} records, {time.monotonic() - started:.0f}s)", flush=True)
    if producer.flush(300):
        raise RuntimeError("records still unacknowledged after 300s")
    return sent, time.monotonic() - started


def timed(fn):  # noqa: ANN001, ANN201
    started = time.monotonic()
    result = fn()
    return time.monotonic() - started, result


def full_scan(bootstrap: str, key: bytes) -> tuple[int, int]:
    """Every record of the four topics read and its key compared: (records read, matches)."""
    matches = 0
    with PartitionReader(bootstrap, client_id="bench-full-scan") as reader:
        for topic in TOPICS:
            for part in range(reader.partitions(topic)):
                low, high = reader.watermarks(topic, part)
                matches += sum(1 for rec in reader.read(topic, part, low, high) if rec.key == key)
        return reader.records_read, matches


def dump(bootstrap: str, limit: int) -> int:
    from ops.topics_io import read_range

    return sum(1 for _ in read_range(bootstrap, ROLLOUTS.name, limit=limit))


def trace(bootstrap: str, gid: str, around_ms: int | None = None) -> tuple[int, str]:
    with PartitionReader(bootstrap, client_id="bench-trace") as reader:
        story = Tracer(reader, TraceOptions(around_ms=around_ms)).tell(gid)
    complete = (story.prompt is not None and len(story.rollouts) == GROUP and story.scored is not None
                and story.learner is not None and story.learner.status == "trained")
    return story.records_read, "complete" if complete else "INCOMPLETE: " + "; ".join(story.notes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=250_000, help="groups (4 rollouts each: 1M rollouts by default)")
    p.add_argument("--days", type=float, default=3.0, help="the run's length the timestamps spread over")
    p.add_argument("--bootstrap", help="an existing broker with empty topics (default: a fresh local one)")
    p.add_argument("--dump-limit", type=int, default=200_000, help="records the kafka-python dump reads")
    args = p.parse_args()
    broker = None
    if args.bootstrap is None:
        from ops.kafka import Broker

        broker = Broker(Path(tempfile.mkdtemp(prefix="bench-trace-")) / "kafka")
        args.bootstrap = broker.start()
    try:
        ensure_topics(args.bootstrap)
        print(f"publishing {args.groups} groups over {args.days} days ...", flush=True)
        end = int(time.time() * 1000) - 60_000
        sent, seconds = publish(args.bootstrap, args.groups, args.days, end)
        print(f"published {sent} records in {seconds:.0f}s ({sent / seconds:.0f}/s)", flush=True)
        rows = run_sides(args, end)
    finally:
        if broker is not None:
            broker.stop()
    print(f"\n{args.groups} groups: {args.groups} prompts, {args.groups * GROUP} rollouts, {args.groups} scored, "
          f"{args.groups} learner metrics over {args.days} days")
    print("| side | group | records read | seconds | found |\n|---|---|---|---|---|")
    for side, which, read, secs, found in rows:
        print(f"| {side} | {which} | {read} | {secs:.2f} | {found} |")


def run_sides(args: argparse.Namespace, end: int) -> list[tuple]:
    step = args.days * 86_400_000 / args.groups
    rows = []
    for which, g in (("near the end", args.groups - 10), ("in the middle", args.groups // 2)):
        gid = group_id_for(f"bench/{g}", f"{g:08x}")
        secs, (read, found) = timed(lambda: trace(args.bootstrap, gid))
        rows.append(("trace", which, read, secs, found))
        around = int(end - (args.groups - g) * step)
        secs, (read, found) = timed(lambda: trace(args.bootstrap, gid, around))
        rows.append(("trace --around", which, read, secs, found))
        print(rows[-2], rows[-1], flush=True)
    gid = group_id_for(f"bench/{args.groups - 10}", f"{args.groups - 10:08x}")
    secs, (read, matches) = timed(lambda: full_scan(args.bootstrap, gid.encode()))
    rows.append(("full scan (librdkafka, keys only)", "near the end", read, secs, f"{matches} records"))
    print(rows[-1], flush=True)
    secs, read = timed(lambda: dump(args.bootstrap, args.dump_limit))
    rows.append((f"topics dump --topic rollouts (kafka-python, decoded; first {read})", "-", read, secs, "-"))
    print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    main()
