"""`m1flow data validate`: every row's schema, and its gold scored through the path a rollout takes.

The path: record -> Prompt (to_prompt) -> framed bytes (m1flow.bus.codec, as on Kafka) -> a Rollout
whose response is the gold written as a policy would (m1flow.kinds.gold_response) -> framed bytes ->
svc_reward's scorer in this process. A row whose gold does not score full reward is bad: its
prompt, its gold or its verifier disagree, and training on it would teach noise. So is a row whose
verifier can be gamed: every other accepted answer must score too, and the wrong answers
m1flow.kinds.probe makes from the gold (0, 1, empty, the gold's words or letters reordered, its
numbers swapped or moved by one, ...) must not; the error names the one that scores. Before the gold
is scored, each row is screened in file order (`RowScreen`): an id that another row already has (two
prompts with one prompt id, within one file or directory) and a gold that is a missing value written
as text (`None`, `nan`) are bad. A row whose encoded Prompt is over the bus's record limit is bad too
(m1flow.source.prompt_oversize): the broker would refuse it and the source dead-letter it. Code and SWE rows
need svc_sandbox: one local sandbox process is started on the first such row (or `--sandbox ADDR`
is used), tethered to this process (ops.tethered) so that no exit leaves it running. Nothing is published.
"""
from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.data.record import RowError, TaskRecord
from m1flow.kinds import KINDS, NoGold, gold_response
from m1flow.source import prompt_oversize
from m1flow.kinds.base import accepted
from m1flow.kinds.probe import probe_response, probes
from m1flow.status import Status
from m1flow.task_store import TaskStoreConfig, TaskStoreError


def reward_scorer(sandbox_address: str = "", task_store: TaskStoreConfig | None = None) -> Any:
    """svc_reward's scoring in this process (its client's LocalScorer): what the service would write."""
    from svc_reward.client import LocalScorer, RewardConfig

    return LocalScorer(RewardConfig(sandbox_address=sandbox_address, task_store=task_store or TaskStoreConfig()))


Locate = Callable[[int], tuple[str, int]]  # a source's row -> (its file, its row there): Table.locate
MISSING_GOLDS = frozenset({"none", "nan", "null", "<na>"})  # how Python, pandas and JSON write "no value"


HINTS = {"math": "; the math kind compares values: where the answer's form matters (words, a factorisation, "
                 "a reduced fraction, an order), use kind text"}


def _full(result: Any) -> bool:
    """Whether a score is full reward: judged, 1, and not marked wrong."""
    return result.status is Status.OK and result.reward >= 1.0 - 1e-6 and result.correct is not False


@dataclass
class Verdict:
    """What the check of one row found: bad (error), schema-checked only (unchecked) or good;
    label: what the summary counts it under (a verl row's data_source, else its source)."""
    index: int
    error: RowError | None = None
    unchecked: str = ""
    label: str | None = None  # None: not counted per label; "": a row that did not decode


class RowScreen:
    """Checks that need the rows seen before (run in file order, before the gold is scored), one per
    source (a file or a directory): a prompt id (`<source>/<id>`) met twice; a gold that is a missing
    value written as text. Across sources ids may repeat (a train and a test file of one set)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, int]] = {}
        self._paths: dict[str, str] = {}

    def check(self, path: str, row: int, record: TaskRecord) -> RowError | None:
        key = f"{record.source}/{record.id}"
        first = self._seen.setdefault(key, (self._paths.setdefault(path, path), row))
        if first != (path, row):
            return RowError(path, row, "id", f"duplicate id {record.id!r}: {first[0]}:{first[1]} has it too "
                                             f"(prompt ids <source>/<id> must be unique: {key!r})")
        gold = record.verifier.gold
        if gold and gold.strip().lower() in MISSING_GOLDS:
            return RowError(path, row, "verifier.gold", f"{gold.strip()!r} is a missing value written as text "
                                                        "(None, NaN, null), not an answer")
        return None


class GoldChecker:
    """Scores gold answers; starts the sandbox on the first code or SWE row unless given one. A row's
    payload_uri must name an intact file of `task_store` (by default the run's, run/tasks) within
    its size cap, as the reward service will require."""

    def __init__(self, sandbox: str = "", run_dir: Path | None = None,
                 say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
                 task_store: TaskStoreConfig | None = None, envs: Path | None = None) -> None:
        self.sandbox_address, self.run_dir, self.say = sandbox, run_dir, say
        self.envs = envs  # the SWE environments the sandbox it starts holds
        self.task_store = task_store or TaskStoreConfig()
        self.store = self.task_store.store(Path("run"))  # RewardConfig's run_dir: the same default
        self._plain: Any = None
        self._with_sandbox: Any = None
        self._sandbox_proc: Any = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def check(self, path: str, index: int, record: TaskRecord, row: int | None = None) -> Verdict:
        """The verdict on source row `index`; errors name `path` and `row` (default: index), the
        row's own file and row inside a directory."""
        row = index if row is None else row
        prompt = record.to_prompt(group_size=1, run_id="validate")
        too_large = prompt_oversize(prompt)
        if too_large is not None:  # the bus would refuse it: the source would dead-letter it
            return Verdict(index, RowError(path, row, "prompt", too_large))
        if record.verifier.payload_uri:
            try:
                self.store.verify(record.verifier.payload_uri)
            except TaskStoreError as refused:
                return Verdict(index, RowError(path, row, "verifier.payload_uri", str(refused)))
        try:
            response = gold_response(record)
        except NoGold as why:
            return Verdict(index, unchecked=str(why))
        prompt = codec.decode(codec.encode(prompt), events.Prompt)
        rollout_id = codec.new_id()
        rollout = events.Rollout(
            header=codec.header("validate", run_id="validate", group_id=prompt.prompt_id, rollout_id=rollout_id),
            rollout_id=rollout_id, group_id=prompt.prompt_id, prompt_id=prompt.prompt_id, index=0, group_size=1,
            task_type=prompt.task_type, prompt_text=prompt.text, response_text=response,
            finish_reason=events.FINISH_REASON_STOP, verifier=prompt.verifier, source=prompt.source,
            domain=prompt.domain)
        rollout = codec.decode(codec.encode(rollout), events.Rollout)
        result = self._scorer(record.verifier.family).score_group(rollout.prompt_text, [rollout.response_text],
                                                                 rollout.verifier)[0]
        field_name = KINDS.get(record.verifier.family).gold_field
        if not _full(result):
            why = f"the gold scores {result.reward:g}, not 1 ({Status(result.status).name}: {result.detail})"
            return Verdict(index, RowError(path, row, field_name, why))
        gamed = self._gameable(record, rollout)
        return Verdict(index, RowError(path, row, field_name, gamed) if gamed else None)

    def _gameable(self, record: TaskRecord, rollout: events.Rollout) -> str | None:
        """Why the row's scorer can be gamed (m1flow.kinds.probe): an accepted answer that does not
        score, or a wrong answer that does; None when neither."""
        verifier = record.verifier
        scorer = self._scorer(verifier.family)
        others = accepted(verifier.gold, verifier.spec)[1:]
        if others:
            results = scorer.score_group(rollout.prompt_text, [probe_response(verifier, a) for a in others],
                                         rollout.verifier)
            for answer, result in zip(others, results):
                if not _full(result):
                    return (f"the accepted answer {answer!r} scores {result.reward:g}, not 1 "
                            f"({Status(result.status).name}: {result.detail})")
        wrong = probes(verifier, record.instructions)
        if not wrong:
            return None
        results = scorer.score_group(rollout.prompt_text, [probe_response(verifier, p.answer) for p in wrong],
                                     rollout.verifier)
        for probe, result in zip(wrong, results):
            if _full(result):
                hint = HINTS.get(verifier.family, "")
                return f"the wrong answer {probe.answer!r} ({probe.why}) scores 1 ({result.detail}){hint}"
        return None

    def prepare(self, record: TaskRecord) -> None:
        """Build the scorer a record needs (and start the sandbox) here, in the calling thread: the
        tethered sandbox dies with the thread that started it, so that must be the main one."""
        self._scorer(record.verifier.family)

    def _scorer(self, family: str) -> Any:
        if not KINDS.get(family).sandbox:
            if self._plain is None:
                self._plain = reward_scorer(task_store=self.task_store)
            return self._plain
        if self._with_sandbox is None:
            self._with_sandbox = reward_scorer(self.sandbox_address or self._start_sandbox(), self.task_store)
        return self._with_sandbox

    def _start_sandbox(self) -> str:
        from ops.launcher import ServiceProcess

        if self.run_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="m1flow-validate-")
            self.run_dir = Path(self._tmp.name)
        self.say("validate: code/swe rows: starting a local sandbox ...")
        self._sandbox_proc = ServiceProcess(
            "sandbox", 0, self.run_dir, ["--bootstrap", "unused:0", *self._env_args()],
            entry=[sys.executable, "-m", "ops.tethered", str(os.getpid()), "svc_sandbox"]).start()
        return self._sandbox_proc.wait_ready(120).grpc_address

    def _env_args(self) -> list[str]:
        """The local sandbox's flags for the SWE environments: they were built over this host's interpreter
        (swe-make --envs), which only the jail shares; with `auto`, an engine that answers would run their
        tests in the run image, where that interpreter is not, and every gold would be a SANDBOX_ERROR."""
        return ["--swe-envs", str(Path(self.envs).resolve()), "--backend", "jail"] if self.envs else []

    def close(self) -> None:
        for scorer in (self._plain, self._with_sandbox):
            if scorer is not None:
                scorer.close()
        if self._sandbox_proc is not None:
            self._sandbox_proc.stop(10)
        if self._tmp is not None:
            self._tmp.cleanup()


def check_rows(checker: GoldChecker, path: str, rows: Iterable[Sequence[Any]], jobs: int = 2,
               locate: Locate | None = None, screen: RowScreen | None = None) -> Iterator[Verdict]:
    """Verdicts in row order, `jobs` gold checks at once, a bounded window in flight. rows:
    (row, record or RowError) or, from a source's labelled(), (row, record or RowError, label).
    locate: where a row's errors point (a directory's data file and row); screen: the checks in
    row order (RowScreen), a fresh one when not given."""
    screen = screen if screen is not None else RowScreen()
    with ThreadPoolExecutor(max(jobs, 1)) as pool:
        window: deque[tuple[Future[Verdict], str | None] | Verdict] = deque()
        for index, item, *rest in rows:
            label = rest[0] if rest else None
            where, row = locate(index) if locate is not None else (path, index)
            error = item if isinstance(item, RowError) else screen.check(where, row, item)
            if error is not None:
                window.append(Verdict(index, error, label=label))
            else:
                checker.prepare(item)
                window.append((pool.submit(checker.check, where, index, item, row), label))
            while len(window) > 4 * jobs:
                yield _done(window.popleft())
        while window:
            yield _done(window.popleft())


def _done(item: tuple[Future[Verdict], str | None] | Verdict) -> Verdict:
    if isinstance(item, Verdict):
        return item
    future, label = item
    verdict = future.result()
    verdict.label = label
    return verdict


@dataclass
class Tally:
    """Rows by verdict."""
    rows: int = 0
    good: int = 0
    bad: int = 0
    unchecked: Counter[str] = field(default_factory=Counter)

    def add(self, verdict: Verdict) -> None:
        self.rows += 1
        if verdict.error is not None:
            self.bad += 1
        elif verdict.unchecked:
            self.unchecked[verdict.unchecked] += 1
        else:
            self.good += 1

    def counts(self) -> str:
        return f"{self.good} good, {self.bad} bad, {sum(self.unchecked.values())} schema-checked only"


@dataclass
class Summary(Tally):
    """The run's tally, and one per label (a verl row's data_source, else its source) for the lines
    under it when the rows came from more than one."""
    files: int = 0
    by_label: dict[str, Tally] = field(default_factory=dict)

    def add(self, verdict: Verdict) -> None:
        super().add(verdict)
        if verdict.label is not None:
            self.by_label.setdefault(verdict.label, Tally()).add(verdict)

    def line(self) -> str:
        reasons = "; ".join(f"{why}: {n}" for why, n in self.unchecked.most_common())
        return (f"validate: {self.rows} rows in {self.files} file(s): {self.counts()}"
                + (f" ({reasons})" if reasons else ""))

    def lines(self, most: int = 30) -> list[str]:
        """The summary line, then one per label when the rows have several (the `most` largest, by
        name; rows that did not decode, which name no source, on a line of their own)."""
        if len([label for label in self.by_label if label]) < 2:
            return [self.line()]
        largest = sorted(self.by_label.items(), key=lambda item: (-item[1].rows, item[0]))[:most]
        lines = [f"  {label or '(rows that did not decode)'}: {t.rows} rows: {t.counts()}"
                 for label, t in sorted(largest)]
        rest = len(self.by_label) - len(largest)
        return [self.line(), *lines, *([f"  ... and {rest} more sources"] if rest else [])]
