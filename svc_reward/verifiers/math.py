"""Math answers checked by math-verify inside worker processes with a hard deadline.

Why processes: math-verify's own timeouts rely on signal.alarm (main thread only) and raise a
BaseException, and SymPy can hang or eat memory on adversarial answers. So we switch its timeouts
off and run it in a small pool of worker programs; a worker that misses the deadline is killed and
replaced, and the sample is marked as a timeout (dropped by the learner, never scored 0).
The workers are a program of their own (math_worker.py), not multiprocessing targets, so the pool
works from a plain script without a `__main__` guard, a notebook and a service alike.
Answer extraction happens in the caller so a missing answer costs no round trip.
"""
from __future__ import annotations

import atexit
import json
import queue
import re
import sys
import threading
from pathlib import Path

from m1flow.contracts import events
from m1flow.kinds.answers import normalise_text, notation, unwrap
from m1flow.kinds.base import accepted
from m1flow.kinds.math import MATH
from m1flow.runtime.pipes import PipeWorker
from svc_reward.config import MathVerifyConfig
from svc_reward.kinds import SCORERS, KindContext
from svc_reward.result import ScoreResult, Status
from svc_reward.verifiers.extract import extract_answer, last_boxed, strip_delimiters

_WORKER = Path(__file__).with_name("math_worker.py")


class _Worker(PipeWorker):
    """One math-verify worker process (math_worker.py) and its two pipes: jobs down, verdicts up.

    math_worker.py runs by path with -P, so its folder (which holds this `math` module) does not
    shadow the standard library's `math` in the worker.
    """

    def __init__(self, cfg: MathVerifyConfig) -> None:
        super().__init__(lambda jobs, verdicts: [sys.executable, "-P", str(_WORKER), str(jobs), str(verdicts),
                                                 str(cfg.memory_mb)],
                         ready=b'"ready"', startup_timeout_s=cfg.startup_timeout_s,
                         what="math-verify worker", quiet=True)
        self.tasks = 0

    def ask(self, job: tuple[str, str, str, str], deadline: float) -> tuple[str, str] | None:
        """(verdict, detail) for (gold, answer, the gold's notation, the answer's), or None when the
        worker missed the deadline."""
        self.send(json.dumps(list(job)).encode())
        if not self.poll(deadline):
            return None
        verdict, detail = json.loads(self.recv())
        return verdict, detail


_THIN_SPACE_GROUPS = re.compile(r"(?<=\d)(?:\\,|\\ |~|\\!)(?=\d{3}\b)")


def as_boxed(answer: str) -> str:
    """A gold or extracted answer in the form math-verify parses best: one \\boxed{}.

    Digit groups written with thin spaces (1\\,000) are joined: math-verify reads them as a product.
    """
    inner = last_boxed(answer)
    text = strip_delimiters(inner if inner is not None else answer)
    return "\\boxed{" + _THIN_SPACE_GROUPS.sub("", text) + "}"


def _written(text: str, how: str) -> str:
    """A gold or answer as the worker reads it: programming notation as it is (one pair of braces or
    brackets around it opened: `{cos(x)}`), anything else as one \\boxed{} for math-verify."""
    return unwrap(text) if how == "expr" else as_boxed(text)


class MathVerifierPool:
    """A thread-safe pool of math-verify workers; at most `workers` comparisons run at once."""

    def __init__(self, config: MathVerifyConfig | None = None) -> None:
        self.config = config or MathVerifyConfig()
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(self.config.workers)
        self._closed = False

    def verify(self, response: str, gold: str, timeout_s: float | None = None,
               style: str = "auto", answers: list[str] | tuple[str, ...] = ()) -> ScoreResult:
        """Score a full model response against a gold answer (bare or \\boxed{}) and any other accepted
        `answers`; `style` says where the answer is (m1flow.kinds.math.STYLES: the dataset's own
        convention, 'auto' for any, 'bare' for what follows the reasoning)."""
        golds = [g for g in dict.fromkeys([gold, *answers]) if strip_delimiters(g)]
        if not golds:
            return ScoreResult.failed(Status.JUDGE_ERROR, "empty gold answer")
        answer = extract_answer(response, style)
        if answer is None:
            return ScoreResult.failed(Status.FORMAT_ERROR, f"no {MATH.style(style).reads} after the reasoning")
        results = []
        for one in golds:
            result = self.compare(one, answer, timeout_s)
            if result.correct:
                return result
            results.append(result)
        judged = [r for r in results if r.status is Status.OK]
        return judged[0] if judged else results[0]

    def compare(self, gold: str, answer: str, timeout_s: float | None = None) -> ScoreResult:
        """Score an already extracted answer against a gold answer, each read as it is written
        (m1flow.kinds.answers.notation): a gold of words as normalised text, programming notation by
        SymPy's parser, LaTeX and numbers by math-verify."""
        gold_text, answer_text = strip_delimiters(gold), strip_delimiters(answer)
        gold_notation = notation(gold_text)
        if gold_notation == "text":
            want, got = normalise_text(gold_text), normalise_text(answer_text)
            sign = "==" if got == want else "!="
            return ScoreResult.scored(got == want, detail=f"text {got[:100]!r} {sign} {want[:100]!r}")
        answer_notation = "expr" if notation(answer_text) == "expr" else "latex"
        job = (_written(gold_text, gold_notation), _written(answer_text, answer_notation), gold_notation,
               answer_notation)
        deadline = self.config.timeout_s if timeout_s is None else timeout_s
        with self._slots:
            if self._closed:
                raise RuntimeError("MathVerifierPool is closed")
            try:
                worker = self._checkout()
            except (RuntimeError, OSError) as err:
                return ScoreResult.failed(Status.SANDBOX_ERROR, f"math-verify worker did not start: {err!r}")
            healthy = False
            try:
                answered = worker.ask(job, deadline)
                if answered is None:
                    return ScoreResult.failed(Status.VERIFIER_TIMEOUT, f"math-verify over {deadline:.1f}s")
                verdict, detail = answered
                healthy = True
            except (EOFError, OSError, ValueError) as err:
                return ScoreResult.failed(Status.SANDBOX_ERROR, f"math-verify worker died: {err!r}")
            finally:
                self._checkin(worker, healthy)
        if verdict == "bad_gold":
            return ScoreResult.failed(Status.JUDGE_ERROR, detail)
        if verdict == "error":
            return ScoreResult.failed(Status.JUDGE_ERROR, f"math-verify raised {detail}")
        return ScoreResult.scored(verdict == "correct", detail=detail)

    def _checkout(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return _Worker(self.config)

    def _checkin(self, worker: _Worker, healthy: bool) -> None:
        worker.tasks += 1
        if healthy and not self._closed and worker.tasks < self.config.max_tasks_per_worker:
            self._idle.put(worker)
        else:
            worker.kill()

    def close(self) -> None:
        """Stop idle workers now; busy ones stop when their comparison returns."""
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                return

    def __enter__(self) -> "MathVerifierPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default_pool: MathVerifierPool | None = None
_default_lock = threading.Lock()


def default_pool() -> MathVerifierPool:
    """The process-wide pool, created on first use and closed at exit."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool._closed:
            _default_pool = MathVerifierPool()
            atexit.register(_default_pool.close)
        return _default_pool


def verify_math(response: str, gold: str, timeout_s: float = MathVerifyConfig().timeout_s) -> ScoreResult:
    """Score a response's final answer against the gold answer through the shared pool."""
    return default_pool().verify(response, gold, timeout_s)


class MathKind:
    """The `math` kind: math-verify in this replica's worker pool (its workers start on the first check).

    spec_json may hold {"style": "boxed" | "math_dapo" | "gsm8k" | "auto" | "bare"}: where the answer
    is, as the dataset's own scorer looks for it (verl's math_reward, math_dapo and gsm8k); default
    auto; and "answers": more accepted answers, any of which scores.
    """

    def __init__(self, config: MathVerifyConfig) -> None:
        self.pool = MathVerifierPool(config)

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        data = json.loads(spec.spec_json) if spec.spec_json else {}
        style = data.get("style", "auto")
        if style not in MATH.style_names:
            return ScoreResult.failed(Status.JUDGE_ERROR, f"unknown math answer style {style!r}; "
                                                          f"known: {', '.join(MATH.style_names)}")
        return self.pool.verify(response, spec.gold, style=style, answers=accepted(spec.gold, data)[1:])

    def close(self) -> None:
        self.pool.close()


@SCORERS.register("math")
def math_kind(ctx: KindContext) -> MathKind:
    return MathKind(ctx.config.math)
