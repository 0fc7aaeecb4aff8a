"""`m1flow`: run the local broker and services, inspect topics and lag, replay a range of a topic (and
compare the replay with the original), trace a sample through the topics.

Every error a user can cause or meet (no broker, an unreachable one, a bad argument) ends in one
line on stderr saying what to do, and exit status 2; tracebacks are for bugs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import uuid
from pathlib import Path

from ops.kafka import Broker, BrokerError
from ops.control_cli import add_parsers as add_control_parsers
from ops.data_cli import add_parsers as add_data_parsers
from ops.services import NAMES, service

DEFAULT_RUN = Path(os.environ.get("M1FLOW_RUN_DIR", "run"))


class CliError(Exception):
    """A problem the user can fix; printed as one line."""


def _broker(args: argparse.Namespace) -> Broker:
    return Broker(args.run_dir / "kafka")


def _bootstrap(args: argparse.Namespace) -> str:
    """--bootstrap, or the local broker of --run-dir if one runs; else a CliError saying what to do."""
    if args.bootstrap:
        return args.bootstrap
    broker = _broker(args)
    if not broker.running():
        raise CliError(f"no broker running under {broker.run_dir}: start one with `m1flow up` "
                       "(or `m1flow kafka start`), or pass --bootstrap HOST:PORT")
    return broker.bootstrap


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
    from ops.topics_io import dump_jsonl

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
    """Lag per consumer group. The learner resumes from the offsets in its newest checkpoint, not
    from its group's commits, so its row shows those (marked `ckpt`) when the run dir has them."""
    from m1flow.bus.admin import group_lag, list_groups

    bootstrap = _bootstrap(args)
    learner = _learner_offsets(args.run_dir)
    print(f"{'group':<32}{'topic/partition':<20}{'committed':>10}{'end':>8}{'lag':>8}  source")
    for group in list_groups(bootstrap):
        for (topic, part), (committed, end) in sorted(group_lag(bootstrap, group).items()):
            source = "commit"
            if group == "m1flow-learner" and f"{topic}/{part}" in learner:
                committed, source = learner[f"{topic}/{part}"], "ckpt"
            print(f"{group:<32}{f'{topic}/{part}':<20}{committed:>10}{end:>8}{end - committed:>8}  {source}")
    return 0


def _learner_offsets(run_dir: Path) -> dict[str, int]:
    from m1flow.checkpoint import latest, load_state

    found = latest(run_dir / "learner" / "checkpoints")
    return load_state(found).offsets if found is not None else {}


def cmd_dlq(args: argparse.Namespace) -> int:
    """Dead letters, one line each: where the record was, which group rejected it, and why."""
    from ops.topics_io import read_range

    print(f"{'source':<22}{'group':<28}{'service':<10}error")
    for entry in read_range(_bootstrap(args), "dlq", args.from_, args.to, args.limit):
        letter = entry.get("value", {})
        where = f"{letter.get('source_topic', '?')}/{letter.get('partition', 0)}@{letter.get('offset', 0)}"
        if args.group and letter.get("consumer_group") != args.group:
            continue
        first = (letter.get("error") or entry.get("error", "")).splitlines()[:1]
        print(f"{where:<22}{letter.get('consumer_group', ''):<28}{letter.get('service', ''):<10}{first[0] if first else ''}")
    return 0


def secure_replay(run_dir: Path, bootstrap: str, service: str, group: str, suffix: str) -> dict[str, str]:
    """On a secure broker a replay runs the service under its own principal, not the operator's: the
    group must be one its ACLs allow, and the operator (admin) creates the `.suffix` topics it writes,
    which it may not. The service's identity as environment variables; none on a plaintext broker."""
    from m1flow.bus.admin import ensure_topics
    from ops.acls import group_prefix
    from ops.stack import Stack
    from m1flow.security import config as security

    admin = security.current()
    if not admin.enabled:
        return {}
    if not group.startswith(group_prefix(service) + "-"):
        raise CliError(f"on a secure broker a replay of {service} runs as its principal, which may use only "
                       f"consumer groups under '{group_prefix(service)}-': e.g. --group "
                       f"{group_prefix(service)}-replay-{group}")
    ensure_topics(bootstrap, suffix=suffix, security=admin)
    return Stack(run_dir, secure=True).identity_env(service)


def cmd_replay(args: argparse.Namespace) -> int:
    from ops.launcher import launch
    from ops.replay import ReplayError, replay_args
    from ops.topics_io import prepare_replay

    bootstrap = _bootstrap(args)
    service_args = args.service_args[1:] if args.service_args[:1] == ["--"] else args.service_args
    try:  # the policy a learner or rollout replay starts from, and the learner's own checkpoints
        extra = replay_args(args.service, bootstrap, args.run_dir, args.topic, args.group, args.from_, args.to,
                            service_args)
    except ReplayError as exc:
        print(f"cannot replay: {exc}", file=sys.stderr)
        return 2
    suffix = args.output_suffix if args.output_suffix is not None else args.group
    if args.compare and not suffix:
        raise CliError("--compare needs the replay's outputs in '<topic>.<suffix>' copies: drop --output-suffix ''")
    env = secure_replay(args.run_dir, bootstrap, args.service, args.group, suffix)
    stops = prepare_replay(bootstrap, args.topic, args.group, args.from_, args.to)
    print(f"replaying {args.topic} {args.from_}..{args.to or 'end'} into group {args.group}"
          f" ({args.service}); outputs go to " + (f"'<topic>.{suffix}'" if suffix else "the live topics"))
    proc = launch(args.service, args.run_dir, bootstrap, replica=900 + os.getpid() % 100, args=[
        "--group-id", args.group, "--stop-offsets", json.dumps(stops), "--output-suffix", suffix,
        *extra, *service_args], wait=False, env=env)  # a short range can be done before a readiness check would look
    code = proc.proc.wait()
    print(f"replay finished with exit code {code}; log: {proc.log_path}")
    if code:
        print(proc.tail(), file=sys.stderr)
        return 2 if args.compare else code
    if not args.compare:
        return 0
    from ops.diff_cli import compare_replay, report

    return report(compare_replay(bootstrap, args.service, args.topic, args.from_, suffix, args.tolerance), args.json)


def cmd_up(args: argparse.Namespace) -> int:
    """The local stack, supervised, in phases: check the inputs (before anything starts), warm-start a
    policy when no --model is given (said first, with how long), broker, services, run. SIGINT and SIGTERM
    stop it in any phase (ops.interrupt): what was started is stopped, one line says so, and the exit
    code is 128 + the signal's number. Everything it starts is tethered to it (a kill -9 takes them along),
    except a --keep-broker broker."""
    from ops.interrupt import Interrupted, stop_signals

    started: dict[str, object] = {}
    with stop_signals("m1flow up"):
        try:
            return _up(args, started)
        except Interrupted as stop:
            stack = started.get("stack")
            phase = stack.phase if stack is not None else "checking its inputs"
            kept = " but the broker (--keep-broker)" if args.keep_broker and stack is not None else ""
            print(f"m1flow up: {stop.name} while {phase}: stopped everything it started{kept}", flush=True)
            return stop.exit_code


def _up(args: argparse.Namespace, started: dict[str, object]) -> int:
    replicas = _replicas(args.replicas)
    if args.model is not None and not (args.model / "config.json").is_file():
        raise CliError(f"--model {args.model}: not a model directory (no config.json in it)")
    service_args = {"rollout": ["--engine", args.engine], **_source_args(args)}  # before the imports below:
    # a bad input is said in a second or two, not after the half minute torch and transformers take to load
    from ops.demo import warmstart_for
    from ops.interrupt import received
    from ops.stack import Stack
    from ops.supervisor import RestartPolicy, Supervisor

    policy = RestartPolicy(**json.loads(args.restart_policy or "{}"))
    stack = Stack(args.run_dir, replicas=replicas, model=args.model, warmstart=warmstart_for(args.engine),
                  service_args=service_args, secure=args.secure, tethered=True, keep_broker=args.keep_broker)
    started["stack"] = stack
    plan = stack.policy_plan()
    if plan is not None:  # minutes, when it is not cached: say so first; its progress lines follow
        print(f"m1flow up: {plan}", flush=True)
        try:
            stack.initial_policy()
        except RuntimeError as exc:  # the training's own error is above, on its output
            raise CliError(str(exc)) from None
    supervisor = Supervisor(stack, policy, say=lambda line: print(line, flush=True))
    print(f"m1flow up: run dir {stack.run_dir}; starting broker and services ...", flush=True)
    try:
        supervisor.start()
    except (RuntimeError, TimeoutError) as exc:  # a service that did not start: its log's tail, then one line
        print(str(exc), file=sys.stderr)
        raise CliError(f"{str(exc).splitlines()[0]} (while {stack.phase}; its log's last lines are above)") from None
    print(stack.status_table(), flush=True)
    print("stop with Ctrl-C, SIGTERM or `m1flow down`", flush=True)
    try:
        supervisor.run(threading.Event())  # until a stop signal (ops.interrupt raises it here)
    finally:
        supervisor.stop(quiet=received() is not None)
    return 0


def _replicas(pairs: list[str]) -> dict[str, str]:
    try:
        return dict(r.split("=", 1) for r in pairs)
    except ValueError:
        raise CliError(f"--replicas takes name=count pairs, e.g. reward=2 rollout=2; got {pairs}") from None


def _source_args(args: argparse.Namespace) -> dict[str, list[str]]:
    """The prompt source's (and svc_eval's) flags, once every source and held-out set they will read has
    been opened and its first rows read here (ops.sources_file.check_sources): a source that cannot be
    used is one line before anything starts, not a failed service minutes later."""
    from ops.sources_file import SourcesFileError, check_sources, has_eval_sets, resolved_sources

    if not args.sources:
        if any(f"M1FLOW_{key.upper()}" in os.environ for key in ("sources", "eval_sets")):
            try:  # the services take them from the environment: check those
                check_sources(None)
            except SourcesFileError as exc:
                raise CliError(str(exc)) from None
        return {}
    try:  # relative dataset paths are the file's, not the repository root's (where services run)
        resolved = resolved_sources(args.sources, args.run_dir)
        check_sources(resolved, named=args.sources)
    except SourcesFileError as exc:
        raise CliError(str(exc)) from None
    out = {"source": ["--config", str(resolved)]}  # the prompt source runs only when given its datasets
    if has_eval_sets(resolved):
        out["eval"] = ["--config", str(resolved)]  # held-out sets: svc_eval reads the same file (svc_source drops their rows)
    return out


def cmd_down(args: argparse.Namespace) -> int:
    from ops.supervisor import down

    stopped = down(args.run_dir)
    print(f"stopped {stopped} process(es)" if stopped else f"nothing was running under {args.run_dir.resolve()}")
    return 0


def cmd_chaos(args: argparse.Namespace) -> int:
    from ops.chaos.run import ChaosConfig, ChaosRun

    overrides = {k: v for k, v in (("seed", args.seed), ("cycles", args.cycles), ("prompts", args.prompts),
                                   ("spacing_s", args.spacing)) if v is not None}
    report = ChaosRun(ChaosConfig(run_dir=args.run_dir / "chaos", secure=args.secure, **overrides),
                      say=lambda line: print(line, flush=True)).run()
    return 0 if report.ok else 1


def cmd_svc(args: argparse.Namespace) -> int:
    os.execv(sys.executable, [sys.executable, "-m", service(args.name).module, *args.service_args])


def cmd_feed(args: argparse.Namespace) -> int:
    bootstrap = _bootstrap(args)  # before the imports below (torch, seconds on a busy machine): no broker says so at once
    from m1flow.bus import Producer
    from ops.feed import publish
    from m1flow.tasks.arith import problems
    from ops.warmstart import WarmStartConfig

    producer = Producer(bootstrap, "feed")
    if args.dataset:
        return _feed_dataset(args, producer)
    args.n = 64 if args.n is None else args.n
    prefix = args.prefix or f"feed-{uuid.uuid4().hex[:8]}"  # fresh ids even when a seed is fed twice
    ids = publish(producer, problems(seed=args.seed, n=args.n, max_operand=WarmStartConfig().max_operand,
                                     prefix=prefix),
                  group_size=args.group_size, run_id=args.run_id)
    producer.close()
    print(f"published {len(ids)} prompts ({ids[0]} .. {ids[-1]})" if ids else "published 0 prompts")
    return 0


def _feed_dataset(args: argparse.Namespace, producer) -> int:  # noqa: ANN001 - m1flow.bus.Producer
    """A one-shot publish of a file's first rows, in file order, through svc_source's record path."""
    from m1flow.data.dataset import DatasetConfig
    from ops.feed import publish_dataset

    try:
        ids, bad = publish_dataset(producer, DatasetConfig(path=args.dataset), args.n, args.group_size, args.run_id)
    except (OSError, ValueError) as exc:
        raise CliError(f"feed --dataset {args.dataset}: {exc}") from None
    finally:
        producer.close()
    for reason in bad[:5]:
        print(f"skipped (sent to dlq): {reason}", file=sys.stderr)
    print(f"published {len(ids)} prompts from {args.dataset}" + (f"; {len(bad)} bad rows sent to dlq" if bad else ""))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ops.demo import DEMO_CURRICULUM, DemoConfig, run_demo

    return run_demo(DemoConfig(run_dir=args.run_dir, minutes=args.minutes, engine=args.engine, model=args.model,
                               curriculum=DEMO_CURRICULUM if args.curriculum else {}, genrm=args.genrm))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="m1flow", description=__doc__)
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN, help="where the broker and services keep state")
    p.add_argument("--bootstrap", default=None, help="Kafka bootstrap (default: the local broker's)")
    sub = p.add_subparsers(dest="command", required=True)
    _topic_parsers(sub)  # kafka, topics, status, dlq, replay
    _stack_parsers(sub)  # up, down, chaos, svc, feed
    add_control_parsers(sub, _bootstrap)  # control recalibrate|window N|pause|resume, report
    add_data_parsers(sub)  # data validate FILE...
    from ops.diff_cli import add_parser as add_diff_parser
    from ops.trace_cli import add_parser as add_trace_parser
    add_trace_parser(sub, _bootstrap)  # trace ID
    add_diff_parser(sub, _bootstrap)  # diff --original T --replayed T.suffix
    d = sub.add_parser("demo", help="a real RL run of the whole pipeline on this machine")
    d.add_argument("--minutes", type=float, default=8.0, help="minutes of RL (after the cold start and v0's evaluation)")
    d.add_argument("--curriculum", action="store_true",
                   help="the monitor's curriculum (ops/demo.py DEMO_CURRICULUM) instead of the fixed mixture")
    d.add_argument("--genrm", action=argparse.BooleanOptionalAction, default=True,
                   help="the GenRM loop (ops/demo_genrm.py, on by default): a general family ramped in, judged by a "
                        "GenRM that turns length-biased mid-run, which the monitor detects and recalibrates; "
                        "--no-genrm: the verifiable mixture alone")
    _model_flags(d)
    d.set_defaults(func=cmd_demo)
    from ops.cluster import add_parser as add_cluster_parser
    add_cluster_parser(sub)
    from ops.kube import add_parser as add_kube_parser
    add_kube_parser(sub)
    return p


def _topic_parsers(sub: argparse._SubParsersAction) -> None:
    """The broker, the topics and what is on them: kafka, topics, status, dlq, replay."""
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

    s = sub.add_parser("status", help="lag per consumer group (the learner's from its checkpoint)")
    s.set_defaults(func=cmd_status)

    q = sub.add_parser("dlq", help="list dead letters: source record, consumer group, reason")
    q.add_argument("--group", help="only letters from this consumer group")
    q.add_argument("--from", dest="from_", help="offset, ISO time or ms:<epoch ms>")
    q.add_argument("--to")
    q.add_argument("--limit", type=int)
    q.set_defaults(func=cmd_dlq)

    r = sub.add_parser("replay", help="re-feed a range of a topic to a fresh consumer group of a service")
    r.add_argument("--topic", required=True)
    r.add_argument("--from", dest="from_", required=True, help="offset, ISO time or ms:<epoch ms>")
    r.add_argument("--to", help="end (exclusive); default: the current end")
    r.add_argument("--group", required=True, help="a fresh consumer group name")
    r.add_argument("--service", default="reward", help="which service consumes the range")
    r.add_argument("--output-suffix", default=None, help="outputs go to '<topic>.<suffix>' (default: the group)")
    r.add_argument("--compare", action="store_true",
                   help="then match the outputs with the live run's by trace and print what differs (flipped "
                        "verdicts, other samples, the first step whose loss or weights differ); exit 0: nothing "
                        "differs, 1: something does, 2: an error")
    from ops.diff_cli import add_compare_flags
    add_compare_flags(r)
    r.add_argument("service_args", nargs=argparse.REMAINDER, help="after --: the service's own flags")
    r.set_defaults(func=cmd_replay)


def _stack_parsers(sub: argparse._SubParsersAction) -> None:
    """The local stack and what runs on it: up, down, chaos, svc, feed."""
    u = sub.add_parser("up", help="start the broker and all services as local processes, supervised")
    u.add_argument("--replicas", nargs="*", default=[], help="e.g. reward=2 rollout=2")
    u.add_argument("--keep-broker", action="store_true", help="leave the broker running on exit")
    u.add_argument("--secure", action="store_true",
                   help="TLS with a certificate per service and least-privilege ACLs (docs/security.md)")
    u.add_argument("--sources", help="a YAML/JSON file of svc_source settings (a `sources:` list of datasets "
                                     "and generators; relative paths are the file's); starts the prompt source, and "
                                     "svc_eval when it lists held-out sets (`eval_sets:`)")
    u.add_argument("--restart-policy", help='JSON overrides, e.g. \'{"unhealthy_restart_s": 60}\'')
    _model_flags(u)
    u.set_defaults(func=cmd_up)

    w = sub.add_parser("down", help="stop everything `m1flow up` started under --run-dir")
    w.set_defaults(func=cmd_down)

    c = sub.add_parser("chaos", help="run `m1flow up` under random faults, then check the guarantees")
    c.add_argument("--seed", type=int)
    c.add_argument("--cycles", type=int, help="rounds of faults (each hits every service, the broker, the input)")
    c.add_argument("--prompts", type=int, help="prompts fed before the faults start")
    c.add_argument("--spacing", type=float, help="mean seconds between faults")
    c.add_argument("--secure", action="store_true", help="`m1flow up --secure`: TLS, a certificate per service, "
                                                         "ACLs; the faults and checks act as the operator")
    c.set_defaults(func=cmd_chaos)

    v = sub.add_parser("svc", help="run one service in the foreground")
    v.add_argument("name", choices=NAMES)
    v.add_argument("service_args", nargs=argparse.REMAINDER)
    v.set_defaults(func=cmd_svc)

    f = sub.add_parser("feed", help="publish generated arithmetic prompts, or a dataset's rows, on `prompts`")
    f.add_argument("--n", type=int, default=None, help="how many (default: 64 arithmetic prompts, or the whole file)")
    f.add_argument("--dataset", help="a dataset file (jsonl, parquet, csv) or HF directory, published in file order")
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--group-size", type=int, default=8)
    f.add_argument("--run-id", default="local")
    f.add_argument("--prefix", help="prompt id prefix (default: a fresh one, so ids never repeat)")
    f.set_defaults(func=cmd_feed)


def _model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, default=None,
                   help="a local model directory (config.json, safetensors, tokenizer) to start from; "
                        "default: a small model warm-started here for the engine")
    from svc_rollout.client import ENGINE_NAMES

    p.add_argument("--engine", choices=ENGINE_NAMES, default="native",
                   help="rollout engine: native (the hybrid model), hf (transformers generate), vllm")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from confluent_kafka import KafkaException
    from kafka.errors import KafkaError, KafkaTimeoutError

    from m1flow.security.config import activate, from_env

    own = from_env()
    if own.enabled:  # an operator's own identity (a cluster's admin certificate)
        activate(own)
    elif not args.bootstrap and _broker(args).secrets is not None:  # the local stack's admin principal
        activate(_broker(args).admin_security)
    try:
        return args.func(args) or 0
    except CliError as exc:
        return _fail(str(exc))
    except KafkaTimeoutError:
        where = args.bootstrap or "the local broker"
        return _fail(f"cannot reach Kafka at {where}: is it running? (`m1flow kafka status`, `m1flow up`)")
    except (BrokerError, KafkaError, KafkaException, TimeoutError, OSError, ValueError) as exc:
        return _fail(f"{type(exc).__name__}: {exc}".splitlines()[0])
    except KeyboardInterrupt:
        return 130


def _fail(message: str) -> int:
    print(f"m1flow: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
