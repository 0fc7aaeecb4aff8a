"""`m1flow control recalibrate|window N|mixture ...|evaluate --version N|pause|resume` and `m1flow
report`: a person's hand on the loop.

A command goes on `control` like the monitor's own, with evidence that says who sent it (rule
"manual", decided_by "cli:<user>"), so svc_reward, svc_rollout and svc_source follow it and
svc_monitor records it (and adjusts its rules: a manual recalibration starts its cool-down, a
manual window becomes the stage the next advance starts from, a manual mixture is the curriculum's
stage and weights in force).
"""
from __future__ import annotations

import argparse
import getpass
import math
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

from google.protobuf.json_format import MessageToJson

MAX_WINDOW = 2**31 - 1
MAX_LEVEL = 2**31 - 1


def correction_scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the correction scale must be a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the correction scale must be > 0 (1: the configured bounds), got {value}")
    return value


def window_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"max new tokens must be a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_WINDOW:
        raise argparse.ArgumentTypeError(f"max new tokens must be between 1 and {MAX_WINDOW}, got {value}")
    return value


def _named(text: str, what: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"{what} must be NAME=VALUE (a source's name), got {text!r}")
    return name.strip(), value.strip()


def mixture_weight(text: str) -> tuple[str, float]:
    """NAME=W: a source's weight, a finite number >= 0."""
    name, value = _named(text, "--weight")
    try:
        weight = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the weight of {name} must be a number, got {value!r}") from None
    if not math.isfinite(weight) or weight < 0:
        raise argparse.ArgumentTypeError(f"the weight of {name} must be finite and >= 0, got {value}")
    return name, weight


def mixture_level(text: str) -> tuple[str, int]:
    """NAME=L: a generator source's difficulty level, a whole number >= 1."""
    name, value = _named(text, "--level")
    try:
        level = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the level of {name} must be a whole number, got {value!r}") from None
    if not 1 <= level <= MAX_LEVEL:
        raise argparse.ArgumentTypeError(f"the level of {name} must be between 1 and {MAX_LEVEL}, got {level}")
    return name, level


def mixture_text(weights: dict, levels: dict, stage: str) -> str:  # noqa: ANN001 - plain or protobuf maps
    """A mixture as a person reads it: `stage blend: arith=1 chat=0.4; levels arith=3`."""
    parts = [" ".join(f"{k}={weights[k]:g}" for k in sorted(weights))] if weights else []
    if levels:
        parts.append("levels " + " ".join(f"{k}={levels[k]}" for k in sorted(levels)))
    return (f"stage {stage}: " if stage else "") + "; ".join(parts)


def control_command(action: str, reason: str, max_new_tokens: int = 0, user: str | None = None,  # noqa: ANN201
                    weights: dict[str, float] | None = None, levels: dict[str, int] | None = None,
                    stage: str = "", version: int = -1, sets: list[str] | None = None, scale: float = 0.0):
    """The Control message a person's command becomes."""
    from m1flow.bus import codec
    from m1flow.contracts import events

    msg = events.Control(header=codec.header("cli"), reason=reason,
                         evidence=events.Evidence(rule="manual", decided_by=f"cli:{user or getpass.getuser()}"))
    if action == "window":
        msg.set_window.max_new_tokens = max_new_tokens
    elif action == "recalibrate":
        msg.recalibrate.reason = reason
    elif action == "mixture":
        if not weights and not levels:
            raise ValueError("a mixture needs at least one --weight NAME=W or --level NAME=L")
        msg.set_mixture.weights.update(weights or {})
        msg.set_mixture.levels.update(levels or {})
        msg.set_mixture.stage = stage
    elif action == "evaluate":
        if version < 0:
            raise ValueError("evaluate needs --version N (a policy version the learner announced)")
        msg.evaluate.version = version
        msg.evaluate.sets.extend(sets or [])
    elif action == "correction":
        msg.set_correction.scale = scale
    elif action in ("pause", "resume"):
        getattr(msg, action).SetInParent()
    else:
        raise ValueError(f"unknown control action {action!r}")
    return msg


def cmd_control(args: argparse.Namespace, bootstrap: str) -> int:
    """Publish the command; Kafka errors go to the CLI's one-line error handling."""
    from m1flow.bus import Producer
    from m1flow.bus.topics import CONTROL

    msg = control_command(args.action, args.reason, getattr(args, "max_new_tokens", 0),
                          weights=dict(getattr(args, "weight", None) or []),
                          levels=dict(getattr(args, "level", None) or []), stage=getattr(args, "stage", ""),
                          version=getattr(args, "version", -1), sets=getattr(args, "set", None),
                          scale=getattr(args, "scale", 0.0))
    command = msg.WhichOneof("command")
    producer = Producer(bootstrap, "m1flow-cli")
    try:
        producer.send(CONTROL, command, msg)
    finally:
        producer.close(timeout=30)
    detail = f" {msg.set_window.max_new_tokens}" if command == "set_window" else ""
    if command == "set_correction":
        detail = f" {msg.set_correction.scale:g}"
    if command == "set_mixture":
        m = msg.set_mixture
        detail = f" ({mixture_text(dict(m.weights), dict(m.levels), m.stage)})"
    if command == "evaluate":
        detail = f" v{msg.evaluate.version} ({', '.join(msg.evaluate.sets) or 'every set'})"
    print(f"sent {command}{detail} on control (message {msg.header.message_id})")
    return 0


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S") if ms else "-"


SOURCE_VERSIONS = 3  # newest policy versions whose per-source rows `m1flow report` prints


def source_lines(rep, versions: int = SOURCE_VERSIONS) -> list[str]:  # noqa: ANN001 - rpc.MonitorReport
    """The per-source table of the newest versions (accuracy "-": no sample of it had a verdict)."""
    newest = sorted({r.policy_version for r in rep.source_rows})[-versions:]
    shown = [r for r in rep.source_rows if r.policy_version in newest]
    if not shown:
        return []
    opt = lambda row, field, spec: format(getattr(row, field), spec) if row.HasField(field) else "-"  # noqa: E731
    return ["", f"per source (newest {len(newest)} versions):",
            "policy version | source               | kind             | groups | samples | mean reward | "
            "accuracy | mean length | samples/min"] + [
        f"{r.policy_version:>14} | {r.source[:20]:<20} | {r.kind[:16]:<16} | {r.groups:>6} | {r.samples:>7} | "
        f"{r.mean_reward:>11.3f} | {opt(r, 'accuracy', '.3f'):>8} | {r.mean_length:>11.2f} | "
        f"{opt(r, 'samples_per_min', '.1f'):>11}" for r in shown]


def reason_lines(rep) -> list[str]:  # noqa: ANN001 - rpc.MonitorReport
    """Why samples scored what they did, per source and kind over the run (the swe kind's reasons:
    resolved, did_not_apply, does_not_import, ...), most frequent first, with each one's share."""
    by_source: dict[tuple[str, str], dict[str, int]] = {}
    for r in rep.reason_rows:
        by_source.setdefault((r.source, r.kind), {})[r.reason] = r.samples
    if not by_source:
        return []
    lines = ["", "verdict reasons per source (samples, whole run):",
             "source               | kind             | samples | reasons (share)"]
    for (source, kind), counts in sorted(by_source.items()):
        total = sum(counts.values())
        text = ", ".join(f"{reason} {n} ({n / total:.0%})"
                         for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
        lines.append(f"{source[:20]:<20} | {kind[:16]:<16} | {total:>7} | {text}")
    return lines


HELDOUT_VERSIONS = 6  # policy versions per held-out set `m1flow report` prints (the first, and the newest)


def heldout_lines(rep, versions: int = HELDOUT_VERSIONS) -> list[str]:  # noqa: ANN001 - rpc.MonitorReport
    """svc_eval's held-out pass@1 per set with its 95% interval, pass@k and mean length: the first
    version evaluated and the newest ones."""
    if not rep.evals:
        return []
    lines = ["", "held-out (svc_eval; pass@1 with its 95% interval, bootstrap over prompts):",
             "set                  | policy version | prompts x samples | pass@1 [95% interval] | pass@k              "
             "| mean length"]
    by_set: dict[str, list] = {}
    for row in rep.evals:
        by_set.setdefault(row.set, []).append(row)
    for name, rows in by_set.items():
        rows = sorted(rows, key=lambda r: r.policy_version)
        shown = rows if len(rows) <= versions else [rows[0], None, *rows[-(versions - 1):]]
        for r in shown:
            if r is None:
                lines.append(f"{name[:20]:<20} | ... {len(rows) - versions} version(s) between (see the dashboard)")
                continue
            ks = " ".join(f"@{k} {v:.3f}" for k, v in sorted(r.pass_at_k.items()) if k != 1) or "-"
            lines.append(f"{r.set[:20]:<20} | {r.policy_version:>14} | {f'{r.prompts} x {r.samples}':>17} | "
                         f"{r.pass1:.3f} [{r.pass1_low:.3f}, {r.pass1_high:.3f}] | {ks:<19} | {r.mean_length:>11.2f}")
    return lines


def curriculum_line(c) -> str:  # noqa: ANN001 - rpc.CurriculumState
    """The curriculum's stage and mixture in force, one line."""
    if not c.stages and not c.levels and not c.weights:
        return "curriculum: off"
    where = (f"stage {c.stage} ({c.stage_index + 1} of {c.stages}, {c.stage_windows} windows in it)"
             if c.stage else "no stage")
    mixture = mixture_text(dict(c.weights), dict(c.levels), "")
    return f"curriculum: {where}, {c.windows} windows in all" + (f"; {mixture}" if mixture else "")


def format_report(rep, rows: int = 20) -> str:  # noqa: ANN001 - rpc.MonitorReport
    """The report as a person reads it: window, newest versions, per source, signals, alerts, decisions."""
    lines = [f"dashboard {rep.dashboard_url or '(disabled)'}",
             f"output window {rep.window or '-'} (stage {rep.stage if rep.window else '-'})",
             curriculum_line(rep.curriculum), "",
             "policy version | groups | samples | mean reward | accuracy | mean length"]
    shown = list(rep.rows)[-rows:]
    if len(rep.rows) > len(shown):
        lines.append(f"  ... {len(rep.rows) - len(shown)} older versions (see the dashboard)")
    lines += [f"{r.policy_version:>14} | {r.groups:>6} | {r.samples:>7} | {r.mean_reward:>11.3f} | "
              f"{r.accuracy:>8.3f} | {r.mean_length:>11.2f}" for r in shown]
    lines += source_lines(rep)
    lines += reason_lines(rep)
    lines += heldout_lines(rep)
    if rep.signals:
        lines += ["", "newest signals:"] + [f"  {k} = {v:.4g}" for k, v in sorted(rep.signals.items())]
    lines += ["", "alerts (active first):" if rep.alert_log else "alerts: none"]
    lines += [f"  {'ACTIVE  ' if a.active else 'resolved'} {a.severity:<8} {a.kind}/{a.subject}: {a.message} "
              f"(raised {_time(a.raised_unix_ms)}" + (f", resolved {_time(a.resolved_unix_ms)})" if not a.active else ")")
              for a in rep.alert_log]
    lines += ["", "decisions on control (newest first):" if rep.decisions else "decisions: none"]
    for d in rep.decisions:
        what = d.command + (f" {d.max_new_tokens}" if d.command == "set_window" else "")
        if d.command == "set_mixture":
            what += f" ({mixture_text(dict(d.mixture.weights), dict(d.mixture.levels), d.mixture.stage)})"
        versions = f", v{d.evidence.version_from}-{d.evidence.version_to}" if d.evidence.version_to else ""
        lines.append(f"  {_time(d.at_unix_ms)} {what} by {d.evidence.decided_by or '?'} "
                     f"({d.evidence.rule or '?'}{versions}): {d.reason}")
    return "\n".join(lines)


def cmd_report(args: argparse.Namespace) -> int:
    import grpc

    from svc_monitor.client import local_address, report

    try:
        address = args.monitor or local_address(args.run_dir)
        rep = report(address, max_events=args.events)
    except FileNotFoundError as exc:
        print(f"m1flow: error: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"m1flow: error: monitor at {address} did not answer: {exc.code().name} {exc.details()}",
              file=sys.stderr)
        return 2
    print(report_json(rep) if args.json else format_report(rep, args.rows))
    return 0


def report_json(rep: Any) -> str:
    """The report as JSON with every field, those whose value is 0, false or empty included: a
    reader must tell "0 alerts" from "no such field" (protobuf's JSON leaves defaults out)."""
    return MessageToJson(rep, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def add_parsers(sub: argparse._SubParsersAction, bootstrap_of: Callable[[argparse.Namespace], str]) -> None:
    """The `control` and `report` subcommands (cli.py calls this once)."""
    c = sub.add_parser("control", help="send recalibrate, window N, mixture, evaluate, correction S, pause or resume "
                                          "on `control`")
    actions = c.add_subparsers(dest="action", required=True)
    reason = argparse.ArgumentParser(add_help=False)
    reason.add_argument("--reason", default="requested by hand", help="recorded with the command")
    actions.add_parser("recalibrate", parents=[reason], help="refit GenRM's length correction (svc_reward)")
    w = actions.add_parser("window", parents=[reason],
                           help="set the output window (max new tokens) of new requests (svc_rollout)")
    w.add_argument("max_new_tokens", type=window_size)
    m = actions.add_parser("mixture", parents=[reason],
                           help="set source weights and generator levels of the prompt mixture (svc_source); "
                                "the monitor's curriculum goes on from it")
    m.add_argument("--weight", action="append", type=mixture_weight, metavar="NAME=W",
                   help="a source's weight (repeat for more sources; a source not named keeps its weight)")
    m.add_argument("--level", action="append", type=mixture_level, metavar="NAME=L",
                   help="a generator source's difficulty level (repeatable)")
    m.add_argument("--stage", default="", help="the curriculum stage this mixture is (the monitor continues "
                                              "the schedule from it)")
    e = actions.add_parser("evaluate", parents=[reason],
                           help="evaluate a policy version on the held-out sets (svc_eval), besides its schedule")
    e.add_argument("--version", type=int, required=True, help="the policy version (as announced on `policy`)")
    e.add_argument("--set", action="append", metavar="NAME", help="a held-out set (repeatable; default: every set)")
    k = actions.add_parser("correction", parents=[reason],
                           help="scale the learner's mismatch-correction bounds (1: as configured, < 1: tighter); "
                                "the monitor's mismatch rule goes on from it")
    k.add_argument("scale", type=correction_scale)
    actions.add_parser("pause", parents=[reason], help="stop taking new prompts (svc_rollout)")
    actions.add_parser("resume", parents=[reason], help="take prompts again (svc_rollout)")
    c.set_defaults(func=lambda args: cmd_control(args, bootstrap_of(args)))

    r = sub.add_parser("report", help="svc_monitor's report: window, versions, signals, alerts, decisions")
    r.add_argument("--monitor", help="HOST:PORT of the monitor's gRPC (default: the local stack's, from --run-dir)")
    r.add_argument("--events", type=int, default=10, help="newest alerts and decisions to show")
    r.add_argument("--rows", type=int, default=20, help="newest policy versions to show")
    r.add_argument("--json", action="store_true", help="the whole report as JSON")
    r.set_defaults(func=cmd_report)
