"""`m1flow trace ID`: a prompt's, group's or rollout's story from the topics (m1flow.trace.story),
printed as a table per stage or as JSON. Exit status 0 when something of it was found, 1 when
nothing was, 2 for errors."""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import yaml

from m1flow.rl.config import AlgorithmConfig
from m1flow.trace.story import AdvantagePart, LearnerPart, Story, TraceOptions
from ops.topics_io import parse_position

TEXT_CHARS = 60  # of a prompt or response in the table (--full: all of it)


def add_parser(sub: argparse._SubParsersAction, bootstrap: Callable[[argparse.Namespace], str]) -> None:
    t = sub.add_parser("trace", help="a prompt's, group's or rollout's story from the topics: rollouts, verdicts, "
                                     "advantages, the learner step that trained it (or why not), with offsets")
    t.add_argument("id", help="a prompt id, group id (<prompt id>/<8 chars>) or rollout id (<group id>/<index>)")
    t.add_argument("--around", help="a time near its records (ISO or ms:<epoch ms>): search only there, not back "
                                    "from the end")
    t.add_argument("--span", type=float, default=TraceOptions().span_s,
                   help="seconds after one stage's record to look for the next's (default %(default)s)")
    t.add_argument("--learner-config", type=Path,
                   help="the learner's config file (YAML or JSON): its `algorithm:` block computes the advantages "
                        "(default: the learner's defaults)")
    t.add_argument("--algorithm", help="the `algorithm:` block as JSON, over --learner-config's")
    t.add_argument("--topic", action="append", default=[], metavar="LIVE=NAME",
                   help="read a live topic under another name, e.g. scored=scored.fix (a replay's verdicts; "
                        "the learner's part stays the live learner's unless metrics=metrics.fix too)")
    t.add_argument("--json", action="store_true", help="the story as JSON")
    t.add_argument("--full", action="store_true", help="whole prompt and response texts")
    t.set_defaults(func=lambda args: cmd_trace(args, bootstrap(args)))


def options_from(args: argparse.Namespace) -> TraceOptions:
    """TraceOptions from the flags; ValueError naming the flag when one is wrong."""
    algorithm: dict = {}
    if args.learner_config is not None:
        algorithm = learner_algorithm(args.learner_config)
    if args.algorithm:
        try:
            algorithm = {**algorithm, **json.loads(args.algorithm)}
        except json.JSONDecodeError as exc:
            raise ValueError(f"--algorithm: not JSON: {exc}") from None
    topics = {}
    for pair in args.topic:
        live, sep, name = pair.partition("=")
        if not sep or not live or not name:
            raise ValueError(f"--topic takes LIVE=NAME, e.g. scored=scored.fix; got {pair!r}")
        topics[live] = name
    around = parse_position(args.around) if args.around else None
    if around is not None and around[0] != "time":
        raise ValueError(f"--around takes a time (ISO or ms:<epoch ms>), not an offset: {args.around!r}")
    return TraceOptions(around_ms=around[1] if around else None, span_s=args.span,
                        algorithm=AlgorithmConfig(**algorithm), topics=topics)


def learner_algorithm(path: Path) -> dict:
    """The `algorithm:` block of a learner config file (the file itself when it has no such key)."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--learner-config {path}: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--learner-config {path}: expected a mapping, got {type(data).__name__}")
    block = data.get("algorithm", data)
    if not isinstance(block, dict):
        raise ValueError(f"--learner-config {path}: field algorithm: expected a mapping")
    return block


def cmd_trace(args: argparse.Namespace, bootstrap: str) -> int:
    from pydantic import ValidationError

    from m1flow.bus.seek import PartitionReader
    from m1flow.trace.story import Tracer

    try:
        options = options_from(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"field algorithm.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    with PartitionReader(bootstrap, client_id="m1flow-trace") as reader:
        story = Tracer(reader, options).tell(args.id)
    if args.json:
        print(json.dumps(story.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(render(story, full=args.full)))
    return 0 if story.found else 1


# ------------------------------------------------------------------------------- rendering
def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _text(text: str, full: bool) -> str:
    flat = text if full else " ".join(text.split())
    return json.dumps(flat if full or len(flat) <= TEXT_CHARS else flat[:TEXT_CHARS - 3] + "...")


def render(story: Story, full: bool = False) -> list[str]:
    """The story as lines: one block per stage, each record with where it lives."""
    lines = [f"{story.reading} {story.query}" + (f"  (group {story.group_id})" if story.group_id != story.query else "")]
    if story.prompt is not None:
        p = story.prompt
        origin = p.origin
        drawn = (f"; drawn epoch {origin.get('epoch', 0)} position {origin.get('position', 0)} draw "
                 f"{origin.get('draw', 0)}" if origin else "")
        lines += [f"prompt      {p.prompt_id}  {p.at.position}  {_time(p.at.timestamp_ms)}",
                  f"            source {p.source}" + (f" row {p.row}" if p.row else "") + f", kind {p.kind}, gold "
                  f"{json.dumps(p.gold)}, group size {p.group_size or 'the service default'}{drawn}",
                  f"            {_text(p.text, full)}"]
    if story.rollouts:
        lines.append(f"rollouts    {'#':>3}  {'where':<22}{'version':>8}{'tokens':>8}  {'finish':<22}text")
        for r in story.rollouts:
            finish = r.finish + (f" (window {r.window})" if r.finish == "length" else " (truncated)"
                                 if r.finish == "repetition" else "")
            copies = f" x{r.copies}" if r.copies > 1 else ""
            lines.append(f"            {r.index:>3}  {r.at.position + copies:<22}{'v' + str(r.policy_version):>8}"
                         f"{r.length:>8}  {finish:<22}{_text(r.text, full)}")
    if story.scored is not None:
        s = story.scored
        copies = f"  scored {len(s.copies)}x: {', '.join(s.copies)}" if len(s.copies) > 1 else ""
        lines.append(f"verdicts    {s.at.position}  {_time(s.at.timestamp_ms)}  kind {s.kind}"
                     + ("  INCOMPLETE" if s.incomplete else "") + copies)
        lines.append(f"            {'#':>3}  {'status':<18}{'correct':<9}{'reward':>8}  detail")
        for v in s.verdicts:
            correct = "-" if v.correct is None else "yes" if v.correct else "no"
            lines.append(f"            {v.index:>3}  {v.status:<18}{correct:<9}{v.reward:>8.3f}  {v.detail}")
    if story.advantages is not None:
        lines += _advantages(story.advantages)
    if story.learner is not None:
        lines.append(_learner(story.learner))
    lines += [f"note        {n}" for n in story.notes]
    if not story.found:
        lines.append("nothing found: check the id (m1flow topics dump), or widen the search (--around, --span)")
    lines.append(f"read {story.records_read} records in {story.seconds:.2f}s")
    return lines


def _advantages(a: AdvantagePart) -> list[str]:
    lines = [f"advantages  {a.estimator} at v{a.from_version} ({a.version_source}): {a.outcome}",
             f"            {'#':>3}  {'shaped reward':>14}{'advantage':>11}  left out"]
    for s in a.samples:
        reward = "-" if s.shaped_reward is None else f"{s.shaped_reward:.4f}"
        adv = "-" if s.advantage is None else f"{s.advantage:+.4f}"
        lines.append(f"            {s.index:>3}  {reward:>14}{adv:>11}  {s.left_out or ''}".rstrip())
    return lines


def _learner(learner: LearnerPart) -> str:
    left = ", ".join(f"{n} {reason}" for reason, n in learner.left_out.items())
    where = f"  {learner.at.position}" if learner.at is not None else ""
    if learner.status == "trained":
        loss = f"; step loss {learner.step_loss:.4g}" if learner.step_loss is not None else ""
        out = f"trained in the step that made v{learner.version} ({learner.samples_trained} samples{loss})"
    elif learner.status == "skipped":
        out = f"skipped at v{learner.version}: {learner.reason}"
    else:
        out = learner.note
    return f"learner     {out}" + (f"; left out: {left}" if left else "") + where
