"""`m1flow data profile`: each row's pass rate under a policy, measured by the real services.

Why the services and not a loop in this process: a pass rate is only worth filtering on if it is
what training would see, so rows take the path training takes (record -> Prompt by
`m1flow.source.prompt_for` -> svc_rollout samples k completions -> svc_reward's verifier), with the
rollout's sampling settings and the verifier's parsing. No learner runs: the rollout service holds
the policy pinned (`--pinned-policy`, as a replay does), so it follows no `policy` topic and paces
itself by no learner.

Isolation: the profile runs its own tethered stack (broker, reward, rollout, the sandbox when code
or SWE rows need one) under its own run directory and run id. The services read fixed topics with
fixed consumer groups, so on a training run's broker its rollout service would sample the profile's
prompts and its learner train on them; a private broker is the one way they never mix. Every record
carries the profile's run id (`profile-<hash of the arguments>`) and the prompts its producer
(`profile`) and origin (stream = run id, position = row).

Resuming: OUT is appended one line per row as its group is scored (a torn last line, from a kill,
is cut off on the next start). The broker's data and the consumer groups' offsets stay in the run
directory, which the same arguments name again, so a rerun (after Ctrl-C or kill -9) skips the rows
in OUT, takes the rows whose prompts are on `prompts` (their origin says the row) as in flight,
writes those `scored` already holds, leaves the others to the rollout service, which samples again
what it had not finished (its offsets were not committed), and publishes the rest. Rows whose
prompts never reached the broker are published again, with the same message id.
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from m1flow.bus import Producer, codec
from m1flow.bus.topics import DLQ, PROMPTS, SCORED
from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events
from m1flow.data import DatasetConfig, RowError, TableError, TaskRecord, open_source
from m1flow.data.dataset import TaskSource
from m1flow.source import BadRow, prompt_for, row_letter
from m1flow.status import status_of
from ops.progress import Progress

SANDBOX_KINDS = frozenset({"code", "swe"})
PRODUCER = "profile"
PROGRESS_EVERY_S = 10.0


class ProfileError(RuntimeError):
    """A profile that cannot run as asked (bad arguments, an OUT of other arguments): one line."""


class ServiceFailed(RuntimeError):
    """A service of the profile's stack kept exiting; the message holds the end of its log."""


class ProfileConfig(BaseModel):
    """`m1flow data profile`'s settings; the defaults fit a 2-core laptop and the warm-start policy."""

    file: Path = Field(description="the dataset (JSONL, Parquet, CSV, a HF datasets directory)")
    model: Path = Field(description="the policy: a model directory as the learner or the warm start writes it")
    k: int = Field(10, ge=1, le=4096, description="samples per row (the group size)")
    out: Path | None = Field(None, description="the profile, JSONL; default <file stem>.profile.jsonl beside it")
    run_dir: Path | None = Field(None, description="the private stack's directory; default run/profiles/<run id>")
    run_id: str = Field("", description="default: profile-<hash of the arguments that change pass rates>")
    format: str | None = None
    split: str | None = Field(None, description="a directory's split by its exact name; default train, else the "
                                                "only one")
    importer: str = "auto"
    kinds: dict[str, str] = Field(default_factory=dict)
    engine: str = Field("auto", description="rollout engine; auto: native for the hybrid model, else hf")
    max_new_tokens: int = Field(8, ge=1, description="the output window (the rollout service's default)")
    lead: int = Field(64, ge=1, description="rows published ahead of those scored")
    rollout_config: Path | None = Field(None, description="a svc_rollout settings file (vllm:, device, ...)")
    reward_config: Path | None = Field(None, description="a svc_reward settings file (math:, code:, ...)")
    max_restarts: int = Field(3, ge=0, description="restarts of a service that exits before the profile ends")

    def dataset(self) -> DatasetConfig:
        return DatasetConfig(path=str(self.file), format=self.format, importer=self.importer, kinds=self.kinds,
                             split=self.split)

    def resolved_run_id(self) -> str:
        """The run id: the same arguments name the same run (and so resume it)."""
        if self.run_id:
            return self.run_id
        key = {"file": str(self.file.resolve()), "model": str(self.model.resolve()), "k": self.k,
               "max_new_tokens": self.max_new_tokens, "engine": self.engine, "format": self.format,
               "importer": self.importer, "kinds": self.kinds, **({"split": self.split} if self.split else {})}
        return "profile-" + hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]

    def out_path(self) -> Path:
        if self.out is not None:
            return self.out
        return self.file.parent / f"{self.dataset().source_name}.profile.jsonl"

    def run_path(self) -> Path:
        if self.run_dir is not None:
            return self.run_dir
        return Path(os.environ.get("M1FLOW_RUN_DIR", "run")) / "profiles" / self.resolved_run_id()


# ---- one row's outcome ------------------------------------------------------------------------
def outcome_of(group: events.ScoredGroup) -> dict[str, Any]:
    """The raw verifier outcome of a scored group: verdicts (`correct`) among the samples our
    infrastructure did judge, their correctness and rewards; never the learner's shaping.
    pass_rate is None when no sample has a verdict (all infrastructure failures, or a kind
    without verdicts). correctness_mean and _var are given when some correctness is not 0 or 1."""
    judged = [s for s in group.samples if not status_of(s).is_infra_failure]
    verdicts = [s.correct for s in judged if s.HasField("correct")]
    passes = sum(verdicts)
    out: dict[str, Any] = {
        "k": group.group_size or len(group.samples), "judged": len(judged), "verdicts": len(verdicts),
        "passes": passes, "pass_rate": _round(passes / len(verdicts)) if verdicts else None,
        "reward_mean": _round(statistics.fmean(s.reward for s in judged)) if judged else None,
        "infra_failures": len(group.samples) - len(judged), "incomplete": group.incomplete}
    parts = [s.parts.correctness for s in judged]
    if any(c not in (0.0, 1.0) for c in parts):
        out["correctness_mean"] = _round(statistics.fmean(parts))
        out["correctness_var"] = _round(statistics.pvariance(parts))
    return out


def _round(value: float) -> float:
    return round(float(value), 6)


# ---- OUT ----------------------------------------------------------------------------------------
def read_profile(path: Path) -> dict[int, dict[str, Any]]:
    """Row -> its profile line (the first one for a row); a line that does not end in a newline
    (a write cut by a kill) is left out. ProfileError names a line that is not a profile line."""
    rows: dict[int, dict[str, Any]] = {}
    data = path.read_bytes()
    for n, line in enumerate(data[:data.rfind(b"\n") + 1].splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            row = int(entry["row"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ProfileError(f"{path}:{n}: not a profile line ({exc})") from None
        rows.setdefault(row, entry)
    return rows


class ProfileFile:
    """OUT, appended one line per row as rows finish; what a rerun skips."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path, self.run_id = path, run_id
        self.done: set[int] = set()
        if path.exists():
            self._cut_torn_tail()
            for row, entry in read_profile(path).items():
                if entry.get("run") != run_id:
                    raise ProfileError(f"{path} holds the profile of run {entry.get('run')!r}, not of these "
                                       f"arguments ({run_id}): pass another --out, or remove it to start over")
                self.done.add(row)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "a", encoding="utf-8")

    def _cut_torn_tail(self) -> None:
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            os.truncate(self.path, end)

    def write(self, entry: dict[str, Any]) -> None:
        self._fh.write(json.dumps({"run": self.run_id, **entry}) + "\n")
        self.done.add(entry["row"])

    def sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self.sync()
        self._fh.close()


# ---- rows in flight -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Pending:
    """A row whose prompt is published and whose scored group is awaited."""
    row: int
    id: str | None  # None: a row too bad to have one
    source: str
    kind: str | None

    def line(self, **fields: Any) -> dict[str, Any]:
        return {"source": self.source, "row": self.row, "id": self.id, "kind": self.kind, **fields}


def pending_of(prompt: events.Prompt) -> Pending:
    return Pending(int(prompt.origin.position), prompt.prompt_id.removeprefix(f"{prompt.source}/"),
                   prompt.source, prompt.verifier.kind)


def group_key(prompt: events.Prompt) -> str:
    """The group id the services give this prompt's rollouts and ScoredGroup."""
    from svc_rollout.client import group_id_for

    return group_id_for(prompt.prompt_id, prompt.header.message_id)


@dataclass
class Counts:
    total: int = 0
    earlier: int = 0       # in OUT when this run started
    recovered: int = 0     # published by an earlier run, written by this one
    published: int = 0     # published by this run
    written: int = 0       # lines this run wrote (bad rows included)
    bad: int = 0           # rows that could not become a prompt, or that the rollout dead-lettered
    restarts: dict[str, int] = field(default_factory=dict)


# ---- the profile ------------------------------------------------------------------------------
class Profiler:
    """One profile run: its stack, its rows in flight, its OUT."""

    def __init__(self, cfg: ProfileConfig, say: Callable[[str], None] = lambda line: print(line, flush=True)) -> None:
        self.cfg, self.say = cfg, say
        self.run_id = cfg.resolved_run_id()
        self.counts = Counts()
        self.pending: dict[str, Pending] = {}  # group id -> row
        self.pending_rows: set[int] = set()
        self.inherited: set[int] = set()  # rows an earlier run published
        self.labels: dict[int, str] = {}  # row -> what it is counted under (a verl row's data_source)

    def run(self) -> Counts:
        from ops.stack import Stack

        cfg = self.cfg
        source = self._open()
        self.counts.total = len(source)
        out = ProfileFile(cfg.out_path(), self.run_id)
        self.counts.earlier = len(out.done)
        try:
            left, families = self._left(source, out.done)
            if not left:  # nothing to start
                return self.counts
            engine, version = check_policy(cfg.model, cfg.engine)
            stack = Stack(cfg.run_path(), service_args=self._service_args(engine, version), run_id=self.run_id,
                          tethered=True)
            services = (("sandbox",) if families & SANDBOX_KINDS else ()) + ("reward", "rollout")
            self.say(f"profile: run {self.run_id} in {stack.run_dir}: starting {', '.join(services)} "
                     f"(engine {engine}, policy {cfg.model} v{version}, k={cfg.k})")
            try:  # a start that fails stops what it started (Stack.start): nothing is left running
                stack.start(with_demo_policy=False, services=services)
            except (RuntimeError, TimeoutError) as exc:
                raise ServiceFailed(f"the profile's services did not start: {exc}") from None
            try:
                self._profile(stack, source, out)
            finally:
                stack.stop()
        finally:
            out.close()
        return self.counts

    def _open(self) -> TaskSource:
        """The source, read through once (its length) so a damaged file is one line here."""
        try:
            source = open_source(self.cfg.dataset())
            len(source)
        except (TableError, ValueError) as exc:
            raise ProfileError(str(exc).splitlines()[0]) from None
        table = getattr(source, "table", None)
        if hasattr(table, "describe"):
            self.say(f"profile: {table.describe()}")
        return source

    def _left(self, source: TaskSource, done: set[int]) -> tuple[int, set[str]]:
        """How many rows are still to profile, and their verifier families (a sandbox starts only
        for code or swe rows); each row's label, for the summary. A progress line while it reads."""
        left, families = 0, set()
        progress = Progress(f"profile: reading {self.cfg.file}", self.counts.total, PROGRESS_EVERY_S, self.say)
        for n, (row, item, label) in enumerate(source.labelled(), start=1):
            self.labels[row] = sys.intern(label)
            if row not in done:
                left += 1
                if isinstance(item, TaskRecord):
                    families.add(item.verifier.family)
            progress.step(n, f"{left} to profile")
        return left, families

    def label_lines(self) -> list[str]:
        """One line per label (a verl row's data_source, else its source) when the file holds more
        than one: rows, rows in OUT, bad ones, mean pass rate."""
        return label_lines(self.labels, self.cfg.out_path())

    def _service_args(self, engine: str, version: int) -> dict[str, list[str]]:
        cfg = self.cfg
        from m1flow.checkpoint import uri_for

        # services run in the checkout (ops.launcher): paths go to them absolute
        rollout = [*(["--config", str(cfg.rollout_config.resolve())] if cfg.rollout_config else []),
                   "--engine", engine, "--group-size", str(cfg.k), "--max-new-tokens", str(cfg.max_new_tokens),
                   "--pinned-policy", uri_for(cfg.model), "--pinned-policy-version", str(version)]
        reward = ["--config", str(cfg.reward_config.resolve())] if cfg.reward_config else []
        return {"rollout": rollout, "reward": reward}

    def _profile(self, stack: Any, source: TaskSource, out: ProfileFile) -> None:
        bootstrap = stack.bootstrap
        self._recover_published(bootstrap, out.done)
        watcher = TopicWatcher(bootstrap, (SCORED, DLQ), f"{self.run_id}-watch")
        producer = Producer(bootstrap, self.run_id)
        rows = (item for item in source.records() if item[0] not in out.done and item[0] not in self.pending_rows)
        exhausted, said_at = False, time.monotonic()
        try:
            while True:
                exhausted = exhausted or self._fill(rows, producer, source.name, out)
                if exhausted and not self.pending:
                    break
                for message in watcher.poll(timeout_ms=500):
                    self._take(message, out)
                out.sync()
                self._check_services(stack)
                if time.monotonic() - said_at >= PROGRESS_EVERY_S:
                    said_at = time.monotonic()
                    self.say(f"profile: {len(out.done)}/{self.counts.total} rows written, "
                             f"{len(self.pending)} in flight")
        finally:
            watcher.close()
            producer.close()

    def _fill(self, rows: Iterator[tuple[int, TaskRecord | RowError]], producer: Producer, name: str,
              out: ProfileFile) -> bool:
        """Publish rows until `lead` are in flight (acknowledged before returning); True once the
        file has no row left to publish."""
        exhausted = False
        while not exhausted and len(self.pending) < self.cfg.lead:
            item = next(rows, None)
            exhausted = item is None
            if item is not None:
                self._publish(producer, name, *item, out)
        producer.flush()
        out.sync()
        return exhausted

    def _recover_published(self, bootstrap: str, done: set[int]) -> None:
        """The rows an earlier run of this profile published and OUT does not hold: in flight."""
        watcher = TopicWatcher(bootstrap, (PROMPTS,), f"{self.run_id}-prompts")
        try:
            for prompt in watcher.catch_up(timeout_s=120):
                if prompt.origin.stream != self.run_id or prompt.header.trace.run_id != self.run_id:
                    continue
                entry = pending_of(prompt)
                if entry.row not in done:
                    self._await(group_key(prompt), entry)
                    self.inherited.add(entry.row)
        finally:
            watcher.close()
        if self.inherited:
            self.say(f"profile: resuming: {len(done)} rows in {self.cfg.out_path()} already, "
                     f"{len(self.inherited)} published earlier and awaited from `scored`")

    def _await(self, key: str, entry: Pending) -> None:
        self.pending[key] = entry
        self.pending_rows.add(entry.row)

    def _publish(self, producer: Producer, name: str, row: int, item: TaskRecord | RowError,
                 out: ProfileFile) -> None:
        """A row's prompt on `prompts` (its origin names the run and the row), or its bad-row line."""
        path = str(self.cfg.file)
        origin = events.SourceCursor(stream=self.run_id, source=name, epoch=0, position=row)
        try:
            if isinstance(item, Exception):
                raise item
            prompt = prompt_for(item, self.cfg.k, self.run_id, origin, path=path, row=row,
                                header=codec.header(PRODUCER, run_id=self.run_id))
        except (RowError, BadRow) as exc:
            producer.send(DLQ, f"source:{name}", row_letter(exc, name, row, 0, PRODUCER, self.run_id, self.run_id))
            record = item if isinstance(item, TaskRecord) else None
            self._bad(out, Pending(row, record.id if record else None, record.source if record else name,
                                   record.verifier.kind if record else None), str(exc))
            return
        producer.send(PROMPTS, prompt.prompt_id, prompt)
        self._await(group_key(prompt), pending_of(prompt))
        self.counts.published += 1

    def _take(self, message: Any, out: ProfileFile) -> None:
        """A scored group of a row in flight becomes its line; a prompt the rollout service
        dead-lettered becomes a bad row's. Other records (other runs, duplicates) are passed over."""
        if isinstance(message, events.ScoredGroup):
            entry = self.pending.get(message.group_id)
            if entry is None or message.header.trace.run_id != self.run_id:
                return
            out.write(entry.line(**outcome_of(message), policy_version=_version_of(message)))
            self._done(message.group_id, entry)
            return
        if message.source_topic != PROMPTS.name:
            return
        try:
            prompt = codec.decode(message.value, events.Prompt)
        except codec.CodecError:
            return
        key = group_key(prompt)
        if key in self.pending and prompt.header.trace.run_id == self.run_id:
            entry = self.pending[key]
            why = (message.error.splitlines() or ["no reason given"])[0]
            self._bad(out, entry, f"dead-lettered by {message.service}: {why}")
            self._done(key, entry)

    def _bad(self, out: ProfileFile, entry: Pending, why: str) -> None:
        out.write(entry.line(error=why))
        self.counts.bad += 1
        self.counts.written += 1
        self.say(f"profile: bad row: {why}")

    def _done(self, key: str, entry: Pending) -> None:
        del self.pending[key]
        self.pending_rows.discard(entry.row)
        if entry.row in self.inherited:
            self.counts.recovered += 1
        self.counts.written += 1

    def _check_services(self, stack: Any) -> None:
        """A service that exited is started again (its consumer group resumes it), up to
        max_restarts times; then the profile stops with its log's end (OUT keeps what was done)."""
        for proc in list(stack.procs):
            if proc.alive():
                continue
            name = f"{proc.name}-{proc.replica}"
            count = self.counts.restarts[name] = self.counts.restarts.get(name, 0) + 1
            if count > self.cfg.max_restarts:
                raise ServiceFailed(f"{name} exited {count} times (status {proc.proc.returncode}); "
                                    f"the end of {proc.log_path}:\n{proc.tail(20)}")
            self.say(f"profile: {name} exited with {proc.proc.returncode}; restarting it ({count})")
            stack.restart(proc.name, proc.replica, wait=False)


def _version_of(group: events.ScoredGroup) -> int:
    return max((int(s.policy_version) for s in group.samples), default=int(group.header.trace.policy_version))


def check_policy(model: Path, engine: str) -> tuple[str, int]:
    """(the rollout engine for the policy in `model`, its version): checked before anything starts,
    since a rollout service that cannot load its pinned policy waits for one instead of failing."""
    from m1flow import checkpoint
    from svc_rollout.client import known_engine

    if not (model / "config.json").is_file():
        raise ProfileError(f"--model {model}: not a model directory (no config.json)")
    if not checkpoint.has_weights(model):
        raise ProfileError(f"--model {model}: no weights ({', '.join(p.name for p in checkpoint.weight_files(model))})")
    hybrid = checkpoint.is_hybrid(model)
    try:
        engine = ("native" if hybrid else "hf") if engine == "auto" else known_engine(engine)
    except ValueError as exc:
        raise ProfileError(f"--engine: {exc}") from None
    if (engine == "native" and not hybrid) or (engine == "hf" and hybrid):
        what, use = ("the hybrid model", "native or vllm") if hybrid else ("a transformers model", "hf or vllm")
        raise ProfileError(f"--engine {engine} cannot run {model} ({what}): use {use}")
    state = model / checkpoint.STATE_FILE
    return engine, checkpoint.load_state(model).version if state.exists() else 0


def summary_line(counts: Counts, out: Path) -> str:
    done = counts.earlier + counts.written
    return (f"profile: {done}/{counts.total} rows in {out} ({counts.earlier} from earlier runs, {counts.written} "
            f"written now: {counts.recovered} of them published by an earlier run, {counts.bad} bad)")


def label_lines(labels: dict[int, str], out: Path) -> list[str]:
    """Per label: `  <label>: N rows, P profiled (B bad), mean pass rate R` from the rows' labels and
    the lines of OUT (every run's); nothing when the rows have one label."""
    if len(set(labels.values()) - {""}) < 2:
        return []
    entries = read_profile(out) if out.exists() else {}
    rows: dict[str, list[int]] = {}
    for row, label in labels.items():
        rows.setdefault(label, []).append(row)
    lines = []
    for label in sorted(rows):
        done = [entries[r] for r in rows[label] if r in entries]
        bad = sum(1 for e in done if "error" in e)
        rates = [e["pass_rate"] for e in done if e.get("pass_rate") is not None]
        mean = f"{statistics.fmean(rates):.3f}" if rates else "-"
        lines.append(f"  {label or '(rows that did not decode)'}: {len(rows[label])} rows, {len(done)} profiled "
                     f"({bad} bad), mean pass rate {mean}")
    return lines


__all__ = ["Counts", "ProfileConfig", "ProfileError", "ProfileFile", "Profiler", "ServiceFailed", "check_policy",
           "label_lines", "outcome_of", "read_profile", "summary_line"]
