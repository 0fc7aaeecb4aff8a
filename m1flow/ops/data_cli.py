"""`m1flow data ...`: task data tools (`validate` checks files before they feed a run)."""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `data` subcommand (cli.py calls this once)."""
    d = sub.add_parser("data", help="task data: validate files before they feed a run")
    actions = d.add_subparsers(dest="action", required=True)
    v = actions.add_parser("validate", help="check every row's schema and that its gold scores full reward "
                                            "through the reward path; exit 1 if any row is bad")
    v.add_argument("files", nargs="+", type=Path, metavar="FILE",
                   help="JSONL, Parquet, CSV or a Hugging Face datasets directory")
    v.add_argument("--format", help="jsonl, parquet, csv, arrow, hf (default: from the name)")
    v.add_argument("--importer", default="auto", help="m1flow, verl or auto (default)")
    v.add_argument("--kinds", default="{}", help='JSON: verl data_source -> verifier kind, e.g. \'{"my/set": "math"}\'')
    v.add_argument("--sandbox", default="", metavar="ADDR",
                   help="svc_sandbox gRPC address for code and SWE rows (default: start a local one if needed)")
    v.add_argument("--limit", type=int, default=None, help="check only the first N rows of each file")
    v.add_argument("--jobs", type=int, default=2, help="gold checks at once")
    v.set_defaults(func=cmd_validate)


def _fail(message: str) -> int:
    print(f"m1flow: error: {message}", file=sys.stderr)
    return 2


def cmd_validate(args: argparse.Namespace) -> int:
    from m1flow.data import DatasetConfig, TableError, open_source
    from m1flow.ops.data_validate import GoldChecker, Summary, check_rows

    try:
        kinds = json.loads(args.kinds)
        assert isinstance(kinds, dict)
    except (ValueError, AssertionError):
        return _fail(f"--kinds takes a JSON object of data_source -> kind, got {args.kinds!r}")
    try:  # every file opens before any is checked: an unreadable one is a usage error
        sources = [open_source(DatasetConfig(path=str(f), format=args.format, importer=args.importer, kinds=kinds))
                   for f in args.files]
    except (TableError, ValueError) as exc:
        return _fail(str(exc).splitlines()[0])
    previous = signal.signal(signal.SIGTERM, _interrupt)
    checker = GoldChecker(sandbox=args.sandbox)
    summary = Summary(files=len(sources))
    try:
        for path, source in zip(args.files, sources):
            for verdict in check_rows(checker, str(path), source.records(0, args.limit), args.jobs):
                summary.add(verdict)
                if verdict.error is not None:
                    print(verdict.error, flush=True)
    finally:
        checker.close()
        signal.signal(signal.SIGTERM, previous)
    print(summary.line())
    return 1 if summary.bad else 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt
