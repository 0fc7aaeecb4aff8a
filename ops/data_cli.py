"""`m1flow data ...`: task data tools (`validate` checks files before they feed a run; `profile` measures
each row's pass rate under a policy and `filter` keeps the rows in a pass-rate band)."""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `data` subcommand (cli.py calls this once)."""
    d = sub.add_parser("data", help="task data: validate files, profile pass rates, filter by difficulty")
    actions = d.add_subparsers(dest="action", required=True)
    v = actions.add_parser("validate", help="check every row's schema and that its gold scores full reward "
                                            "through the reward path; exit 1 if any row is bad")
    v.add_argument("files", nargs="+", type=Path, metavar="FILE",
                   help="JSONL, Parquet, CSV or a Hugging Face datasets directory")
    v.add_argument("--format", help="jsonl, parquet, csv, arrow, hf (default: from the name)")
    v.add_argument("--importer", default="auto", help="m1flow, verl or auto (default)")
    v.add_argument("--kinds", default="{}", help='JSON: verl data_source -> verifier kind, e.g. \'{"my/set": "math"}\'')
    v.add_argument("--split", default=None, help=SPLIT_HELP)
    v.add_argument("--sandbox", default="", metavar="ADDR",
                   help="svc_sandbox gRPC address for code and SWE rows (default: start a local one if needed)")
    v.add_argument("--limit", type=positive_int, default=None, metavar="N",
                   help="check only the first N rows of each file")
    v.add_argument("--jobs", type=positive_int, default=2, help="gold checks at once")
    v.add_argument("--progress-every", type=float, default=10.0, metavar="S",
                   help="a progress line on stderr at most every S seconds (default 10)")
    v.add_argument("--task-store", type=Path, default=None, metavar="DIR",
                   help="the task store a row's payload_uri must name a file of (default: RUN_DIR/tasks)")
    v.add_argument("--envs", type=Path, default=None, metavar="DIR",
                   help="the SWE rows' environments (swe-make --envs): the local sandbox runs their tests there, "
                        "in the jail (they are built over this host's interpreter)")
    v.set_defaults(func=cmd_validate)
    _add_profile(actions)
    _add_filter(actions)
    _add_swe_make(actions)


SPLIT_HELP = ("a directory's split, by its exact name (train, test, validation, or a hub file's data/<split>-*); "
              "default: train, else the only split")


def positive_int(text: str) -> int:
    """argparse type: a count of 1 or more (a negative --limit read nothing, silently)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _add_source_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", help="jsonl, parquet, csv, hf (default: from the name)")
    parser.add_argument("--importer", default="auto", help="m1flow, verl or auto (default)")
    parser.add_argument("--kinds", default="{}", help="JSON: verl data_source -> verifier kind")
    parser.add_argument("--split", default=None, help=SPLIT_HELP)


def _add_profile(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser("profile", help="each row's pass rate under a policy: k samples per row through the "
                                           "rollout and reward services (resumable: run it again to continue)")
    p.add_argument("file", type=Path, metavar="FILE", help="JSONL, Parquet, CSV or a Hugging Face datasets directory")
    p.add_argument("--model", type=Path, required=True, metavar="DIR",
                   help="the policy: a model directory (a learner checkpoint, a warm start, a HF model)")
    p.add_argument("--k", type=int, default=10, help="samples per row (default 10: pass@10)")
    p.add_argument("--out", type=Path, default=None,
                   help="the profile, JSONL (default: <stem>.profile.jsonl beside FILE)")
    p.add_argument("--run-dir", type=Path, default=None,
                   help="the profile's own broker and service logs (default: run/profiles/<run id>)")
    p.add_argument("--run-id", default="", help="default: profile-<hash of the arguments>")
    p.add_argument("--engine", default="auto", help="rollout engine: auto (native for the hybrid model, else hf), "
                                                    "native, hf, vllm")
    p.add_argument("--max-new-tokens", type=int, default=8, help="output window (default 8, the rollout service's)")
    p.add_argument("--lead", type=int, default=64, help="rows published ahead of those scored (default 64)")
    p.add_argument("--rollout-config", type=Path, default=None, help="a svc_rollout settings file")
    p.add_argument("--reward-config", type=Path, default=None, help="a svc_reward settings file")
    _add_source_flags(p)
    p.set_defaults(func=cmd_profile)


def _add_filter(actions: argparse._SubParsersAction) -> None:
    f = actions.add_parser("filter", help="keep the rows whose profiled pass rate lies in a band")
    f.add_argument("file", type=Path, metavar="FILE", help="the dataset the profile was made from")
    f.add_argument("--profile", type=Path, required=True, metavar="OUT", help="what `m1flow data profile` wrote")
    f.add_argument("--band", action="append", default=[], metavar="[KIND=]LO,HI",
                   help="keep pass rates in (LO, HI); brackets close an end ([0.1,0.8]); KIND= for one kind or "
                        "family (logic=0.1,0.8); repeatable; default (0,0.9), the M1 report's math band")
    f.add_argument("--out", type=Path, default=None, metavar="FILTERED",
                   help="default: <stem>.filtered.<ext> beside FILE, in FILE's format (JSONL for directories)")
    f.add_argument("--keep-unprofiled", action="store_true", help="also keep rows the profile has no pass rate for")
    _add_source_flags(f)
    f.set_defaults(func=cmd_filter)


def _add_swe_make(actions: argparse._SubParsersAction) -> None:
    m = actions.add_parser("swe-make", help="SWE-bench instances from real Python projects: plant bugs in the "
                                            "functions their tests cover, keep those the tests catch")
    m.add_argument("sources", nargs="+", type=Path, metavar="SDIST",
                   help="source distributions (.tar.gz, e.g. from `pip download --no-binary :all:`) or project "
                        "directories, with their tests")
    m.add_argument("--out", type=Path, required=True, help="the instances, JSONL (SWE-bench's format)")
    m.add_argument("--task-store", type=Path, default=Path("run/tasks"), metavar="DIR",
                   help="where the repository snapshots go (default run/tasks: validate's and the reward's)")
    m.add_argument("--seed", type=int, default=0, help="the order mutations are tried in")
    m.add_argument("--max-mutations", type=positive_int, default=50, metavar="N", help="mutations tried per project")
    m.add_argument("--tests", nargs="*", default=None, metavar="PATH",
                   help="test paths to run (default: the project's tests folder)")
    m.add_argument("--envs", type=Path, default=None, metavar="DIR",
                   help="build each project's environment (its requirements) there once and reuse it "
                        "(default: run the suites with this interpreter)")
    m.set_defaults(func=cmd_swe_make)


def cmd_swe_make(args: argparse.Namespace) -> int:
    import tempfile

    from m1flow.data.swe_env import EnvCache
    from m1flow.data.swe_factory import FactoryConfig, FactoryError, make_instances
    from m1flow.task_store import TaskStore

    cfg = FactoryConfig(seed=args.seed, max_mutations=args.max_mutations, tests=args.tests)
    store = TaskStore(args.task_store)
    envs = EnvCache(args.envs) if getattr(args, "envs", None) else None
    written = 0
    with open(args.out, "w") as out:
        for source in args.sources:
            with tempfile.TemporaryDirectory(prefix="m1flow-swe-make-") as work:
                try:
                    instances, stats = make_instances(source, store, cfg, Path(work), envs)
                except FactoryError as exc:
                    return _fail(str(exc))
            out.writelines(json.dumps(instance) + "\n" for instance in instances)
            out.flush()
            written += len(instances)
            print(f"{source}: {stats.line()}", flush=True)
    print(f"swe-make: {written} instances in {args.out}; check them: m1flow data validate {args.out} "
          f"--task-store {args.task_store}")
    return 0


def _fail(message: str) -> int:
    print(f"m1flow: error: {message}", file=sys.stderr)
    return 2


def cmd_validate(args: argparse.Namespace) -> int:
    from m1flow.data import TableError
    from m1flow.task_store import TaskStoreConfig
    from ops.data_validate import GoldChecker, RowScreen, Summary, check_rows
    from ops.progress import Progress

    try:
        kinds = _kinds(args.kinds)
        sources = _open_all(args, kinds)
    except (TableError, ValueError) as exc:
        return _fail(str(exc).splitlines()[0])
    previous = signal.signal(signal.SIGTERM, _interrupt)
    store = getattr(args, "task_store", None) or Path(getattr(args, "run_dir", "run")) / "tasks"
    checker = GoldChecker(sandbox=args.sandbox, task_store=TaskStoreConfig(root=store),
                          envs=getattr(args, "envs", None))
    summary = Summary(files=len(sources))
    try:
        for path, source in zip(args.files, sources):
            total = len(source) if args.limit is None else min(args.limit, len(source))
            progress = Progress(f"validate: {path}", total, getattr(args, "progress_every", 10.0))
            bad = summary.bad
            for n, verdict in enumerate(check_rows(checker, str(path), source.labelled(0, args.limit), args.jobs,
                                                   locate=source.table.locate, screen=RowScreen()), start=1):
                summary.add(verdict)
                if verdict.error is not None:
                    print(verdict.error, flush=True)
                progress.step(n, f"{summary.bad - bad} bad")
    except TableError as exc:  # a file damaged or changed after it was opened
        return _fail(str(exc).splitlines()[0])
    finally:
        checker.close()
        signal.signal(signal.SIGTERM, previous)
    print("\n".join(summary.lines()))
    return 1 if summary.bad else 0


def _open_all(args: argparse.Namespace, kinds: dict[str, str]) -> list:
    """Every file opened and read through once (its length: a damaged .gz shows here, as a
    TableError) before any is checked: an unreadable one is a usage error. What a directory
    holds and which split is read is said on stderr."""
    from m1flow.data import DatasetConfig, open_source

    sources = []
    for f in args.files:
        source = open_source(DatasetConfig(path=str(f), format=args.format, importer=args.importer, kinds=kinds,
                                           split=getattr(args, "split", None)))
        len(source)
        if hasattr(source.table, "describe"):
            print(f"validate: {source.table.describe()}", file=sys.stderr)
        sources.append(source)
    return sources


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _kinds(text: str) -> dict[str, str]:
    try:
        kinds = json.loads(text)
        assert isinstance(kinds, dict)
    except (ValueError, AssertionError):
        raise ValueError(f"--kinds takes a JSON object of data_source -> kind, got {text!r}") from None
    return kinds


def cmd_profile(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ops.profile import ProfileConfig, ProfileError, Profiler, ServiceFailed, summary_line

    try:
        cfg = ProfileConfig(file=args.file, model=args.model, k=args.k, out=args.out, run_dir=args.run_dir,
                            run_id=args.run_id, format=args.format, split=args.split, importer=args.importer,
                            kinds=_kinds(args.kinds),
                            engine=args.engine, max_new_tokens=args.max_new_tokens, lead=args.lead,
                            rollout_config=args.rollout_config, reward_config=args.reward_config)
    except ValidationError as exc:
        err = exc.errors()[0]
        return _fail(f"--{'-'.join(str(p) for p in err['loc']).replace('_', '-')}: {err['msg']}")
    except ValueError as exc:
        return _fail(str(exc))
    profiler = Profiler(cfg)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        profiler.run()
    except ProfileError as exc:
        return _fail(str(exc))
    except ServiceFailed as exc:
        print(f"m1flow: profile stopped: {exc}", file=sys.stderr)
        print("\n".join([summary_line(profiler.counts, cfg.out_path()) + "; run the same command again to continue",
                         *profiler.label_lines()]))
        return 1
    except KeyboardInterrupt:
        print("\n".join([summary_line(profiler.counts, cfg.out_path()) + "; interrupted: run the same command again "
                         "to continue", *profiler.label_lines()]))
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("\n".join([summary_line(profiler.counts, cfg.out_path()), *profiler.label_lines()]))
    return 0


def cmd_filter(args: argparse.Namespace) -> int:
    from m1flow.data import DatasetConfig
    from ops.bands import BandError, Bands, filter_file
    from ops.profile import ProfileError

    try:
        bands = Bands.parse(args.band)
        dataset = DatasetConfig(path=str(args.file), format=args.format, importer=args.importer,
                                kinds=_kinds(args.kinds), split=args.split)
        result = filter_file(dataset, args.profile, bands, args.out, args.keep_unprofiled)
    except (BandError, ProfileError, ValueError) as exc:
        return _fail(str(exc))
    print(result.table())
    kept = sum(c["kept"] for c in result.by_source.values())
    print(f"filter: bands {bands.describe()}; {kept} rows kept in {result.out}")
    return 0
