"""Chunked vs naive per-token log-probs: peak memory and time of forward + backward, same run.

    python bench/logprobs.py                      # V=200064, D=1024, T=2K/8K/32K
    python bench/logprobs.py --tokens 1024 2048 --vocab 50000

Memory method: every case runs in a fresh subprocess. The child builds the inputs (hidden [T, D]
and head [V, D], fp32, both requiring grad), touches them, and reads its peak resident set size
(current RSS, after checking that no earlier transient raised the high-water mark above it); it
then runs forward + backward once and reads the high-water mark ru_maxrss. The difference is the
extra memory the computation needed at its peak (logits, softmax buffers, gradients), as the OS
saw it: PyTorch's CPU allocator returns large blocks to the OS, so RSS tracks live tensors, and a
fresh process means no earlier case's peak hides this one's. Time is the wall time of that one
forward + backward (torch threads = cores; the machine may be shared, so repeat to trust it).

A naive case whose estimated peak (measured bytes per token at the smallest T x T, plus margin)
does not fit in the memory available now is not run; the table shows it as skipped with the
estimate. The naive T=32K logits alone are 32768 x 200064 x 4 B = 26 GB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 2**30


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run_case(method: str, tokens: int, vocab: int, hidden: int, chunk: int | None) -> dict:
    """Runs inside the child process."""
    import torch

    from svc_learner.logprobs import naive_token_logprobs, token_logprobs

    torch.manual_seed(0)
    h = torch.randn(tokens, hidden).mul_(0.05).requires_grad_()  # in place: no transient copies
    w = torch.randn(vocab, hidden).mul_(0.05).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,))
    upstream = torch.randn(tokens)
    base = psutil.Process().memory_info().rss  # resident now, inputs included
    assert _maxrss_bytes() <= base + 64 * 2**20, "an earlier transient would hide part of the peak"
    start = time.perf_counter()
    if method == "naive":
        logp = naive_token_logprobs(h, w, targets)
    else:
        logp = token_logprobs(h, w, targets, chunk_size=chunk)
    (logp * upstream).sum().backward()
    seconds = time.perf_counter() - start
    return {"method": method, "tokens": tokens, "seconds": seconds, "peak_extra": _maxrss_bytes() - base,
            "checksum": float(logp.sum())}


def spawn_case(method: str, tokens: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", method, "--tokens", str(tokens), "--vocab", str(args.vocab),
           "--hidden", str(args.hidden)] + (["--chunk", str(args.chunk)] if args.chunk else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"method": method, "tokens": tokens, "error": f"exit {out.returncode}: {out.stderr.strip()[-300:]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fmt_gib(x: float) -> str:
    return f"{x / GIB:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192, 32768])
    p.add_argument("--vocab", type=int, default=200064)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--chunk", type=int, default=None, help="tokens per chunk (default: bounded by bytes)")
    p.add_argument("--margin-gib", type=float, default=3.0, help="memory to leave free when running naive")
    p.add_argument("--child", choices=["naive", "chunked"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_case(args.child, args.tokens[0], args.vocab, args.hidden, args.chunk)))
        return

    inputs = (args.hidden + args.vocab) * args.hidden * 4
    print(f"V={args.vocab} D={args.hidden} fp32; inputs (hidden + head) {_fmt_gib(inputs)} GiB not counted; "
          f"extra peak RSS of forward+backward, fresh process per case")
    print(f"{'T':>6} | {'naive GiB':>9} {'naive s':>8} | {'chunked GiB':>11} {'chunked s':>9} | "
          f"{'mem ratio':>9} {'time ratio':>10}")
    per_token = None  # naive bytes per token, from the first naive case that ran
    for tokens in sorted(args.tokens):
        naive = None
        estimate = per_token * tokens if per_token else 4.0 * tokens * args.vocab * 4
        available = psutil.virtual_memory().available
        if estimate + args.margin_gib * GIB < available:
            naive = spawn_case("naive", tokens, args)
            if "error" not in naive:
                per_token = per_token or naive["peak_extra"] / tokens
        chunked = spawn_case("chunked", tokens, args)
        if naive is None:
            n_mem, n_s = f"~{_fmt_gib(estimate)}*", "skipped"
            ratio_m = f"~{chunked.get('peak_extra', 0) / estimate:.3f}*" if "error" not in chunked else "-"
            ratio_t = "-"
        elif "error" in naive:
            n_mem, n_s, ratio_m, ratio_t = "error", naive["error"][:8], "-", "-"
        else:
            n_mem, n_s = _fmt_gib(naive["peak_extra"]), f"{naive['seconds']:.1f}"
            ratio_m = f"{chunked['peak_extra'] / naive['peak_extra']:.3f}" if "error" not in chunked else "-"
            ratio_t = f"{chunked['seconds'] / naive['seconds']:.2f}" if "error" not in chunked else "-"
            if "error" not in chunked and abs(naive["checksum"] - chunked["checksum"]) > 1e-3 * tokens:
                print(f"  warning: checksums differ {naive['checksum']} vs {chunked['checksum']}")
        c_mem = _fmt_gib(chunked["peak_extra"]) if "error" not in chunked else "error"
        c_s = f"{chunked['seconds']:.1f}" if "error" not in chunked else chunked["error"][:20]
        print(f"{tokens:>6} | {n_mem:>9} {n_s:>8} | {c_mem:>11} {c_s:>9} | {ratio_m:>9} {ratio_t:>10}", flush=True)
    print("* naive not run: estimated from the measured bytes per token (or 4 x T x V x 4 B) did not fit "
          f"in available memory minus {args.margin_gib} GiB")


if __name__ == "__main__":
    main()
