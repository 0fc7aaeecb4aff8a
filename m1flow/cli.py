"""`m1flow`: run the local broker and services, inspect topics and lag, replay a range of a topic."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from m1flow.kafka import Broker

DEFAULT_RUN = Path(os.environ.get("M1FLOW_RUN_DIR", "run"))


def _broker(args: argparse.Namespace) -> Broker:
    return Broker(args.run_dir / "kafka")


def _bootstrap(args: argparse.Namespace) -> str:
    return args.bootstrap or _broker(args).bootstrap


def cmd_kafka(args: argparse.Namespace) -> int:
    broker = _broker(args)
    if args.action == "start":
        print(broker.start())
    elif args.action == "stop":
        broker.stop()
        print("stopped")
    else:
        state = broker.state()
        print(f"{'running' if broker.running() else 'stopped'}"
              + (f" on {state.bootstrap} (pid {state.pid}, data {broker.run_dir})" if state else ""))
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from m1flow.bus.admin import admin_client, end_offsets
    from m1flow.bus.topics import BY_NAME
    from m1flow.topics_io import dump_jsonl

    bootstrap = _bootstrap(args)
    if args.action == "dump":
        for line in dump_jsonl(bootstrap, args.topic, args.from_, args.to, args.limit):
            print(line)
        return 0
    admin = admin_client(bootstrap)
    try:
        names = sorted(t for t in admin.list_topics() if not t.startswith("__"))
    finally:
        admin.close()
    if args.action == "describe" and args.topic:
        names = [args.topic]
    print(f"{'topic':<24}{'partitions':>11}{'messages':>10}  key / value")
    for name in names:
        ends = end_offsets(bootstrap, name)
        spec = BY_NAME.get(name.split(".", 1)[0])
        kind = f"{spec.key} / {spec.value_type.__name__}" if spec else "?"
        print(f"{name:<24}{len(ends):>11}{sum(ends.values()):>10}  {kind}")
        if args.action == "describe":
            for part, end in sorted(ends.items()):
                print(f"  partition {part}: end offset {end}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from m1flow.bus.admin import group_lag, list_groups

    bootstrap = _bootstrap(args)
    print(f"{'group':<32}{'topic/partition':<20}{'committed':>10}{'end':>8}{'lag':>8}")
    for group in list_groups(bootstrap):
        for (topic, part), (committed, end) in sorted(group_lag(bootstrap, group).items()):
            print(f"{group:<32}{f'{topic}/{part}':<20}{committed:>10}{end:>8}{end - committed:>8}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from m1flow.launcher import launch
    from m1flow.replay import ReplayError, replay_args
    from m1flow.topics_io import prepare_replay

    bootstrap = _bootstrap(args)
    service_args = args.service_args[1:] if args.service_args[:1] == ["--"] else args.service_args
    try:  # the policy a learner or rollout replay starts from, and the learner's own checkpoints
        extra = replay_args(args.service, bootstrap, args.run_dir, args.topic, args.group, args.from_, args.to,
                            service_args)
    except ReplayError as exc:
        print(f"cannot replay: {exc}", file=sys.stderr)
        return 2
    stops = prepare_replay(bootstrap, args.topic, args.group, args.from_, args.to)
    suffix = args.output_suffix if args.output_suffix is not None else args.group
    print(f"replaying {args.topic} {args.from_}..{args.to or 'end'} into group {args.group}"
          f" ({args.service}); outputs go to " + (f"'<topic>.{suffix}'" if suffix else "the live topics"))
    proc = launch(args.service, args.run_dir, bootstrap, replica=900 + os.getpid() % 100, args=[
        "--group-id", args.group, "--stop-offsets", json.dumps(stops), "--output-suffix", suffix,
        *extra, *service_args])
    code = proc.proc.wait()
    print(f"replay finished with exit code {code}; log: {proc.log_path}")
    return code


def cmd_up(args: argparse.Namespace) -> int:
    from m1flow.stack import Stack

    stack = Stack(args.run_dir, replicas=dict(r.split("=") for r in args.replicas))
    stack.start(with_demo_policy=True)
    print(stack.status_table())
    print("press Ctrl-C to stop")
    try:
        while True:
            time.sleep(5)
            stack.restart_crashed()
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop(broker=not args.keep_broker)
    return 0


def cmd_svc(args: argparse.Namespace) -> int:
    os.execv(sys.executable, [sys.executable, "-m", f"svc_{args.name}", *args.service_args])


def cmd_feed(args: argparse.Namespace) -> int:
    from m1flow.bus import Producer
    from m1flow.source import publish
    from m1flow.tasks.arith import problems
    from m1flow.warmstart import WarmStartConfig

    producer = Producer(_bootstrap(args), "feed")
    ids = publish(producer, problems(seed=args.seed, n=args.n, max_operand=WarmStartConfig().max_operand),
                  group_size=args.group_size, run_id=args.run_id)
    producer.close()
    print(f"published {len(ids)} prompts")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from m1flow.demo import DemoConfig, run_demo

    return run_demo(DemoConfig(run_dir=args.run_dir, minutes=args.minutes))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="m1flow", description=__doc__)
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN, help="where the broker and services keep state")
    p.add_argument("--bootstrap", default=None, help="Kafka bootstrap (default: the local broker's)")
    sub = p.add_subparsers(dest="command", required=True)

    k = sub.add_parser("kafka", help="the local single-node KRaft broker")
    k.add_argument("action", choices=["start", "stop", "status"])
    k.set_defaults(func=cmd_kafka)

    t = sub.add_parser("topics", help="list, describe or dump topics")
    t.add_argument("action", choices=["list", "describe", "dump"])
    t.add_argument("--topic")
    t.add_argument("--from", dest="from_", help="offset, ISO time or ms:<epoch ms>")
    t.add_argument("--to")
    t.add_argument("--limit", type=int)
    t.set_defaults(func=cmd_topics)

    s = sub.add_parser("status", help="lag per consumer group")
    s.set_defaults(func=cmd_status)

    r = sub.add_parser("replay", help="re-feed a range of a topic to a fresh consumer group of a service")
    r.add_argument("--topic", required=True)
    r.add_argument("--from", dest="from_", required=True, help="offset, ISO time or ms:<epoch ms>")
    r.add_argument("--to", help="end (exclusive); default: the current end")
    r.add_argument("--group", required=True, help="a fresh consumer group name")
    r.add_argument("--service", default="reward", help="which service consumes the range")
    r.add_argument("--output-suffix", default=None, help="outputs go to '<topic>.<suffix>' (default: the group)")
    r.add_argument("service_args", nargs=argparse.REMAINDER, help="after --: the service's own flags")
    r.set_defaults(func=cmd_replay)

    u = sub.add_parser("up", help="start the broker and all services as local processes")
    u.add_argument("--replicas", nargs="*", default=[], help="e.g. reward=2 rollout=2")
    u.add_argument("--keep-broker", action="store_true")
    u.set_defaults(func=cmd_up)

    v = sub.add_parser("svc", help="run one service in the foreground")
    v.add_argument("name", choices=["rollout", "reward", "sandbox", "learner", "monitor"])
    v.add_argument("service_args", nargs=argparse.REMAINDER)
    v.set_defaults(func=cmd_svc)

    f = sub.add_parser("feed", help="publish generated arithmetic prompts on `prompts`")
    f.add_argument("--n", type=int, default=64)
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--group-size", type=int, default=8)
    f.add_argument("--run-id", default="local")
    f.set_defaults(func=cmd_feed)

    d = sub.add_parser("demo", help="a real RL run of the whole pipeline on this machine")
    d.add_argument("--minutes", type=float, default=4.0)
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
