"""Math answers checked by math-verify inside worker processes with a hard deadline.

Why processes: math-verify's own timeouts rely on signal.alarm (main thread only) and raise a
BaseException, and SymPy can hang or eat memory on adversarial answers. So we switch its timeouts
off and run it in a small pool of spawned workers; a worker that misses the deadline is killed and
replaced, and the sample is marked as a timeout (dropped by the learner, never scored 0).
Answer extraction happens in the caller so a missing answer costs no round trip.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import queue
import re
import threading
from multiprocessing.connection import Connection

from pydantic import BaseModel, Field

from svc_reward.result import ScoreResult, Status
from svc_reward.verifiers.extract import extract_math_answer, last_boxed, strip_delimiters


class MathVerifyConfig(BaseModel):
    workers: int = Field(2, ge=1, description="worker processes; also the most checks at once")
    timeout_s: float = Field(5.0, gt=0, description="hard deadline of one comparison")
    startup_timeout_s: float = Field(120.0, gt=0, description="time a new worker may take to import SymPy")
    memory_mb: int = Field(2048, ge=0, description="address-space limit per worker; 0 = none")
    max_tasks_per_worker: int = Field(1000, ge=1, description="recycle workers to drop SymPy caches")


# ---------------------------------------------------------------- inside the worker process

def _is_plain_number(x: object) -> bool:
    from sympy import Expr
    return isinstance(x, Expr) and bool(x.is_number)


def _tiny_numbers_differ(gold: object, pred: object) -> bool:
    """math-verify rounds to 6 decimals, so 1/2004! == 1/2006!; compare tiny values relatively."""
    from sympy import Abs
    if not (_is_plain_number(gold) and _is_plain_number(pred)):
        return False
    a, b = gold.evalf(30), pred.evalf(30)
    scale = max(Abs(a), Abs(b))
    return bool(0 < scale < 1e-6 and Abs(a - b) > 1e-6 * scale)


def _identities_differ(gold: object, pred: object, verify) -> bool:
    """Two identities (1+1=2, 2+2=4) both reduce to 0=0 and math-verify calls them equal; compare sides."""
    from sympy import Eq, simplify
    if not (isinstance(gold, Eq) and isinstance(pred, Eq)):
        return False
    if simplify(gold.lhs - gold.rhs) != 0 or simplify(pred.lhs - pred.rhs) != 0:
        return False
    same = lambda g, p: verify(g, p, timeout_seconds=None)  # noqa: E731
    return not ((same(gold.lhs, pred.lhs) and same(gold.rhs, pred.rhs))
                or (same(gold.lhs, pred.rhs) and same(gold.rhs, pred.lhs)))


def judge(gold_text: str, pred_text: str) -> tuple[str, str]:
    """('correct' | 'wrong' | 'bad_gold', detail) for two \\boxed{} strings; runs math-verify untimed."""
    from math_verify import parse, verify
    gold = parse(gold_text, parsing_timeout=None)
    if not gold:
        return "bad_gold", f"gold did not parse: {gold_text[:200]}"
    pred = parse(pred_text, parsing_timeout=None)
    if not pred:
        return "wrong", "answer did not parse"
    if not verify(gold, pred, timeout_seconds=None):
        return "wrong", f"{pred[-1]} != {gold[-1]}"
    try:
        if _tiny_numbers_differ(gold[0], pred[0]):
            return "wrong", "tiny numbers differ relatively"
        if _identities_differ(gold[0], pred[0], verify):
            return "wrong", "different identities"
    except Exception:  # noqa: BLE001  (a failed extra check leaves math-verify's verdict)
        pass
    return "correct", f"{pred[-1]} == {gold[-1]}"


def _worker_main(conn: Connection, memory_mb: int) -> None:
    import logging
    import resource
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import math_verify  # noqa: F401  (pay the SymPy import before saying ready)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    judge(r"\boxed{1}", r"\boxed{1}")  # warm the parser so the first real deadline is fair
    if memory_mb:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            conn.send(judge(*job))
        except Exception as err:  # noqa: BLE001  (report, keep serving)
            conn.send(("error", f"{type(err).__name__}: {err}"[:300]))


# ---------------------------------------------------------------- in the caller

class _Worker:
    def __init__(self, ctx: mp.context.BaseContext, cfg: MathVerifyConfig) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, cfg.memory_mb), daemon=True,
                                   name="math-verify-worker")
        self.process.start()
        child.close()
        self.tasks = 0
        try:
            ready = self.conn.poll(cfg.startup_timeout_s) and self.conn.recv() == "ready"
        except EOFError:
            ready = False
        if not ready:
            self.kill()
            raise RuntimeError("math-verify worker did not start")

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


_THIN_SPACE_GROUPS = re.compile(r"(?<=\d)(?:\\,|\\ |~|\\!)(?=\d{3}\b)")


def as_boxed(answer: str) -> str:
    """A gold or extracted answer in the form math-verify parses best: one \\boxed{}.

    Digit groups written with thin spaces (1\\,000) are joined: math-verify reads them as a product.
    """
    inner = last_boxed(answer)
    text = strip_delimiters(inner if inner is not None else answer)
    return "\\boxed{" + _THIN_SPACE_GROUPS.sub("", text) + "}"


class MathVerifierPool:
    """A thread-safe pool of math-verify workers; at most `workers` comparisons run at once."""

    def __init__(self, config: MathVerifyConfig | None = None) -> None:
        self.config = config or MathVerifyConfig()
        self._ctx = mp.get_context("spawn")
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(self.config.workers)
        self._closed = False

    def verify(self, response: str, gold: str, timeout_s: float | None = None) -> ScoreResult:
        """Score a full model response against a gold answer (bare or \\boxed{})."""
        if not strip_delimiters(gold):
            return ScoreResult.failed(Status.JUDGE_ERROR, "empty gold answer")
        answer = extract_math_answer(response)
        if answer is None:
            return ScoreResult.failed(Status.FORMAT_ERROR, "no \\boxed{} or Answer: line after the reasoning")
        return self.compare(gold, answer, timeout_s)

    def compare(self, gold: str, answer: str, timeout_s: float | None = None) -> ScoreResult:
        """Score an already extracted answer against a gold answer."""
        job = (as_boxed(gold), as_boxed(answer))
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
                worker.conn.send(job)
                if not worker.conn.poll(deadline):
                    return ScoreResult.failed(Status.VERIFIER_TIMEOUT, f"math-verify over {deadline:.1f}s")
                verdict, detail = worker.conn.recv()
                healthy = True
            except (EOFError, OSError) as err:
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
            return _Worker(self._ctx, self.config)

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
