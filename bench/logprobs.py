"""LM-head log-probs + policy loss, forward + backward: naive vs chunked vs fused, same run.

    python bench/logprobs.py                      # V=200064, D=1024, T=2K/8K/32K
    python bench/logprobs.py --tokens 1024 2048 --vocab 50000 --repeat 2

What runs (one CISPO token-level loss on T tokens, old log-probs spread so the clip fires):
* naive:   log_softmax((hidden @ W.T).float()).gather(target), then the loss, autograd backward;
* chunked: svc_learner.logprobs.token_logprobs (chunks of tokens, backward recomputes logits),
           then the same loss;
* fused:   svc_learner.logprobs.fused_head_loss (the loss gradient formed per chunk in the
           forward pass, no recomputation), what the learner runs by default.

Memory method: every case runs in a fresh subprocess. The child builds the inputs (hidden [T, D]
and head [V, D], fp32, both requiring grad), touches them, and reads its peak resident set size
(current RSS, after checking that no earlier transient raised the high-water mark above it); it
then runs forward + backward once and reads the high-water mark ru_maxrss. The difference is the
extra memory the computation needed at its peak (logits, softmax buffers, gradients), as the OS
saw it: PyTorch's CPU allocator returns large blocks to the OS, so RSS tracks live tensors, and a
fresh process means no earlier case's peak hides this one's. Time is the wall time of that one
forward + backward (--threads, default all cores); with --repeat R each case runs R times (fresh process
each, methods interleaved) and the table keeps the fastest time and the largest peak.

A naive case whose estimated peak (measured bytes per token at the smallest T x T, plus margin)
does not fit in the memory available now is not run; the table shows it as skipped with the
estimate. The naive T=32K logits alone are 32768 x 200064 x 4 B = 26 GB.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 2**30
METHODS = ("naive", "chunked", "fused")


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run_case(method: str, tokens: int, vocab: int, hidden: int, chunk: int | None) -> dict:
    """Runs inside the child process."""
    import torch

    from svc_learner.logprobs import fused_head_loss, naive_token_logprobs, token_logprobs
    from m1flow.rl.objectives import LossSpec, TokenObjective

    torch.manual_seed(0)
    h = torch.randn(tokens, hidden).mul_(0.05).requires_grad_()  # in place: no transient copies
    w = torch.randn(vocab, hidden).mul_(0.05).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,))
    # logp is about -log V here; old log-probs 0.3 nats around it put some ratios outside the clip
    old = torch.full((1, tokens), -math.log(vocab)) + 0.3 * torch.randn(1, tokens)
    objective = TokenObjective.build(old, torch.randn(1, tokens), torch.ones(1, tokens), LossSpec("cispo"))
    objective = objective.select(torch.ones(1, tokens, dtype=torch.bool))
    base = psutil.Process().memory_info().rss  # resident now, inputs included
    assert _maxrss_bytes() <= base + 64 * 2**20, "an earlier transient would hide part of the peak"
    start = time.perf_counter()
    if method == "fused":
        loss, _, _ = fused_head_loss(h, w, targets, objective.coefficients, chunk_size=chunk)
    else:
        logp = naive_token_logprobs(h, w, targets) if method == "naive" else token_logprobs(h, w, targets, chunk)
        loss = objective.loss(logp)
    loss.backward()
    seconds = time.perf_counter() - start
    return {"method": method, "tokens": tokens, "seconds": seconds, "peak_extra": _maxrss_bytes() - base,
            "checksum": float(h.grad.double().abs().sum())}


def spawn_case(method: str, tokens: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", method, "--tokens", str(tokens), "--vocab", str(args.vocab),
           "--hidden", str(args.hidden), "--threads", str(args.threads)] + (["--chunk", str(args.chunk)] if args.chunk else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"method": method, "tokens": tokens, "error": f"exit {out.returncode}: {out.stderr.strip()[-300:]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_of(runs: list[dict]) -> dict:
    """Fastest time and largest peak over repeats; the first error if any run failed."""
    errors = [r for r in runs if "error" in r]
    if errors:
        return errors[0]
    return {**runs[0], "seconds": min(r["seconds"] for r in runs), "peak_extra": max(r["peak_extra"] for r in runs)}


def _fmt_gib(x: float) -> str:
    return f"{x / GIB:.2f}"


def _cells(case: dict | None, naive: dict | None, estimate: float) -> tuple[str, str, str, str]:
    """(GiB, s, memory ratio, time ratio) cells of one method against naive."""
    if case is None:
        return f"~{_fmt_gib(estimate)}*", "skipped", "1", "1"
    if "error" in case:
        return "error", case["error"][:8], "-", "-"
    mem, sec = _fmt_gib(case["peak_extra"]), f"{case['seconds']:.1f}"
    if naive is None:
        return mem, sec, f"~{case['peak_extra'] / estimate:.3f}*", "-"
    if "error" in naive:
        return mem, sec, "-", "-"
    return mem, sec, f"{case['peak_extra'] / naive['peak_extra']:.3f}", f"{case['seconds'] / naive['seconds']:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192, 32768])
    p.add_argument("--vocab", type=int, default=200064)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--chunk", type=int, default=None, help="tokens per chunk (default: bounded by bytes)")
    p.add_argument("--repeat", type=int, default=1, help="runs per case; fastest time and largest peak kept")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads per case (0: all cores); 1 keeps a shared machine's other jobs off the case's core")
    p.add_argument("--margin-gib", type=float, default=3.0, help="memory to leave free when running naive")
    p.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        print(json.dumps(run_case(args.child, args.tokens[0], args.vocab, args.hidden, args.chunk)))
        return

    inputs = (args.hidden + args.vocab) * args.hidden * 4
    print(f"V={args.vocab} D={args.hidden} fp32, CISPO loss; inputs (hidden + head) {_fmt_gib(inputs)} GiB not "
          f"counted; extra peak RSS of forward+backward, fresh process per case, best of {args.repeat}, "
          f"threads {args.threads or 'all'}")
    print(f"{'T':>6} | {'naive GiB':>9} {'s':>6} | {'chunked GiB':>11} {'s':>6} {'mem':>6} {'time':>5} | "
          f"{'fused GiB':>9} {'s':>6} {'mem':>6} {'time':>5}")
    per_token = None  # naive bytes per token, from the first naive case that ran
    for tokens in sorted(args.tokens):
        estimate = per_token * tokens if per_token else 4.0 * tokens * args.vocab * 4
        run_naive = estimate + args.margin_gib * GIB < psutil.virtual_memory().available
        methods = [m for m in METHODS if run_naive or m != "naive"]
        runs: dict[str, list[dict]] = {m: [] for m in methods}
        for _ in range(args.repeat):
            for m in methods:
                runs[m].append(spawn_case(m, tokens, args))
        cases = {m: best_of(rs) for m, rs in runs.items()}
        naive = cases.get("naive")
        if naive is not None and "error" not in naive:
            per_token = per_token or naive["peak_extra"] / tokens
        sums = [c["checksum"] for c in cases.values() if "error" not in c]
        if sums and max(sums) - min(sums) > 1e-3 * max(abs(x) for x in sums):
            print(f"  warning: |grad| checksums differ: {sums}")
        n_mem, n_s, _, _ = _cells(naive, naive, estimate)
        row = [f"{tokens:>6} | {n_mem:>9} {n_s:>6}"]
        for m, width in (("chunked", 11), ("fused", 9)):
            mem, sec, rm, rt = _cells(cases[m], naive, estimate)
            row.append(f"{mem:>{width}} {sec:>6} {rm:>6} {rt:>5}")
        print(" | ".join(row), flush=True)
    print("mem, time: ratio to naive in the same run. * naive not run: estimated from the measured bytes per "
          f"token (or 4 x T x V x 4 B) did not fit in available memory minus {args.margin_gib} GiB")


if __name__ == "__main__":
    main()
