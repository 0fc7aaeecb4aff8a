"""Math verification throughput: our process pool against math-verify called in-process.

Why: the pool pays pickling and a pipe round trip per check to gain hard deadlines and thread
safety; this shows what that costs. Rows from bench/sandbox_rate.py (another helper's) are added
when that module is importable.

    PYTHONPATH=. python bench/verifiers.py [--repeat 10] [--workers 2]
"""
from __future__ import annotations

import argparse
import importlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from svc_reward.verifiers.extract import extract_math_answer
from svc_reward.verifiers.math import MathVerifierPool, MathVerifyConfig, as_boxed

CASES = [  # (response, gold): a mix of the answer shapes seen in math RL
    (r"... so the answer is \boxed{42}.", "42"),
    (r"\boxed{\frac{3}{4}}", "0.75"),
    (r"\boxed{\sqrt{2}/2}", r"\frac{1}{\sqrt{2}}"),
    (r"\boxed{x^2+2x+1}", "(x+1)^2"),
    (r"\boxed{(1,2]}", "(1,2)"),
    (r"\boxed{\{1,2,3\}}", r"\{3,2,1\}"),
    ("Answer: $y = 2x + 1$", "y=1+2x"),
    (r"\boxed{50\%}", r"\frac{1}{2}"),
    (r"\boxed{3\sqrt{3}}", r"\sqrt{27}"),
    (r"\boxed{\begin{pmatrix}1&2\\3&4\end{pmatrix}}", r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"),
    (r"\boxed{\log_2 8}", "3"),
    (r"\boxed{-\infty}", r"\infty"),
    ("The final answer is **17**.", "17"),
    (r"\boxed{\frac{1}{2006!}}", r"\frac{1}{2004!}"),
    (r"\boxed{2i+1}", "1+2i"),
    (r"\boxed{\text{(C)}}", "C"),
]


def in_process_rate(cases: list[tuple[str, str]]) -> float:
    """math_verify.parse + verify with its own (signal) timeouts, in this thread."""
    from math_verify import parse, verify
    pairs = [(as_boxed(gold), as_boxed(extract_math_answer(resp) or "")) for resp, gold in cases]
    start = time.perf_counter()
    for gold, pred in pairs:
        verify(parse(gold), parse(pred))
    return len(pairs) / (time.perf_counter() - start)


def pool_rate(cases: list[tuple[str, str]], workers: int) -> float:
    """The same checks through MathVerifierPool, driven by `workers` threads."""
    with MathVerifierPool(MathVerifyConfig(workers=workers)) as pool:
        with ThreadPoolExecutor(workers) as threads:  # start every worker before timing
            list(threads.map(lambda case: pool.verify(*case), cases[:workers * 2]))
            start = time.perf_counter()
            list(threads.map(lambda case: pool.verify(*case), cases))
            return len(cases) / (time.perf_counter() - start)


def sandbox_rows() -> list[tuple[str, float, str, float]] | str:
    """Rows from bench/sandbox_rate.measure(), or why they are unavailable."""
    for module in ("bench.sandbox_rate", "sandbox_rate"):
        try:
            return importlib.import_module(module).measure()
        except ImportError as err:
            reason = f"{err}"
        except Exception as err:  # noqa: BLE001  (their failure must not hide our numbers)
            return f"sandbox_rate.measure() failed: {err!r}"
    return f"not importable ({reason})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="passes over the case list")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    cases = CASES * args.repeat
    ours, peer = pool_rate(cases, args.workers), in_process_rate(cases)
    rows = [(f"math pool ({args.workers} workers)", ours, "math_verify in-process", peer)]
    extra = sandbox_rows()
    print(f"{len(cases)} math checks per side\n")
    print(f"{'name':<34} {'per s':>9}   {'peer':<34} {'per s':>9} {'ratio':>7}")
    for name, rate, peer_name, peer_rate in rows + (extra if isinstance(extra, list) else []):
        print(f"{name:<34} {rate:>9.1f}   {peer_name:<34} {peer_rate:>9.1f} {rate / peer_rate:>7.2f}")
    if isinstance(extra, str):
        print(f"\nsandbox part unavailable: {extra}")


if __name__ == "__main__":
    main()
