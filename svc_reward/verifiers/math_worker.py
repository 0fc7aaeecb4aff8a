"""The math-verify worker: a program of its own, started by MathVerifierPool with this file's path.

Why a program and not a multiprocessing target: `spawn` and `forkserver` re-run the caller's main
module in every worker, so a plain script without an `if __name__ == "__main__":` guard (or a
notebook) got a broken pool; `fork` copies a threaded service. This file imports only the standard
library and math-verify, never the caller. It reads jobs (two \\boxed{} strings, JSON) from one
descriptor and writes verdicts (JSON) to another, and exits when its parent is gone.
"""
from __future__ import annotations

import json
import logging
import os
import resource
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection


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


def _exit_with_parent(parent: int) -> None:
    """A comparison can run for minutes in SymPy; the worker must not outlive a killed parent."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def main(jobs_fd: int, verdicts_fd: int, memory_mb: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    jobs, verdicts = Connection(jobs_fd, writable=False), Connection(verdicts_fd, readable=False)
    import math_verify  # noqa: F401  (pay the SymPy import before saying ready)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    judge(r"\boxed{1}", r"\boxed{1}")  # warm the parser so the first real deadline is fair
    if memory_mb:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    verdicts.send_bytes(b'"ready"')
    while True:
        try:
            gold, pred = json.loads(jobs.recv_bytes())
        except EOFError:
            return
        try:
            verdict, detail = judge(gold, pred)
        except Exception as err:  # noqa: BLE001  (report, keep serving)
            verdict, detail = "error", f"{type(err).__name__}: {err}"
        verdicts.send_bytes(json.dumps([verdict, detail[:500]]).encode())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
