"""Lightning attention speed: this project's kernels next to fla and torch SDPA, in one run.

GPU: prefill B1 H64 T8K/32K/128K and B2 H64 T16K (D 128, bf16), forward and forward+backward, and
decode B1/16/64/256 H64; ms (median of triton's do_bench), ratio to fla's chunk_simple_gla /
fused_recurrent_simple_gla with M1 semantics (g_gamma = -slope, scale = 1), and the share of the
memory floor reached (prefill: q, k, v, o once = 1 KB per token-head; decode: the fp32 state read
and written = 128 KB per sequence-head; both at 4.29 TB/s, the H200's device copy rate).
CPU (no GPU present): the chunked PyTorch path against the token-by-token recurrence and SDPA.

    PYTHONPATH=. python bench/lightning_attn.py [--quick]
"""
import argparse
import time
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from kernels.lightning_attn import (build_slopes, chunk_lightning_attn, lightning_attn,
                                    lightning_attn_decode, naive_lightning_attn)

COPY_BYTES_PER_S = 4.29e12
PREFILL_BYTES_PER_TOKEN_HEAD = 1024
DECODE_BYTES_PER_SEQ_HEAD = 128 * 1024
GPU_PREFILL = [(1, 64, 8192), (1, 64, 32768), (1, 64, 131072), (2, 64, 16384)]
GPU_DECODE = [1, 16, 64, 256]
DEVICE = "cuda"  # the GPU path's device (a constant so the path can be smoke-run elsewhere)
SDPA_MAX_T = 32768  # causal softmax attention beyond this takes seconds per call
NAIVE_MAX_BWD_T = 2048  # autograd through a longer token loop takes minutes on CPU


def load_fla() -> tuple[Optional[Callable], Optional[Callable]]:
    try:
        from fla.ops.simple_gla import chunk_simple_gla, fused_recurrent_simple_gla
    except ImportError:
        return None, None
    return chunk_simple_gla, fused_recurrent_simple_gla


def gpu_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def cpu_ms(fn: Callable[[], object], reps: int = 5) -> float:
    """Best of `reps`: on a shared CPU the minimum is the time the code needs, the rest is noise."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return min(times)


def fmt(x: Optional[float], spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths]] + rows:
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths)))


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor]:
    """Softmax attention peer, in and out in the [B, T, H, D] layout of the linear kernels."""
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=True)
    return (o.transpose(1, 2),)


def fwd_bwd(fn: Callable[[], tuple], inputs: list[torch.Tensor], do: torch.Tensor) -> Callable:
    def run():
        for x in inputs:
            x.grad = None
        fn()[0].backward(do)
    return run


def bench_gpu_prefill(fla_chunk: Optional[Callable], quick: bool) -> list[list[str]]:
    rows = []
    slope = build_slopes(64, 40, 80).to(DEVICE)
    for B, H, T in GPU_PREFILL[:2] if quick else GPU_PREFILL:
        q, k, v = (torch.randn(B, T, H, 128, device=DEVICE, dtype=torch.bfloat16)
                   .mul_(0.5).requires_grad_() for _ in range(3))
        do = torch.randn_like(q)
        floor = B * T * H * PREFILL_BYTES_PER_TOKEN_HEAD / COPY_BYTES_PER_S * 1e3
        ours = lambda: lightning_attn(q, k, v, slope)  # noqa: E731
        fla = (lambda: fla_chunk(q, k, v, g_gamma=-slope, scale=1.0)) if fla_chunk else None
        sdpa = (lambda: sdpa_causal(q, k, v)) if T <= SDPA_MAX_T else None
        for mode in ("fwd", "fwd+bwd"):
            def timed(fn):
                if fn is None:
                    return None
                return gpu_ms(fn if mode == "fwd" else fwd_bwd(fn, [q, k, v], do))
            t_ours, t_fla, t_sdpa = timed(ours), timed(fla), timed(sdpa)
            rows.append([f"prefill {mode} B{B} H{H} T{T // 1024}K", fmt(t_ours), fmt(t_fla),
                         fmt(t_ours / t_fla if t_fla else None, ".2f"), fmt(t_sdpa),
                         fmt(floor), fmt(100 * floor / t_ours, ".0f") if mode == "fwd" else "-"])
        del q, k, v, do
        torch.cuda.empty_cache()
    return rows


def bench_gpu_decode(fla_recurrent: Optional[Callable]) -> list[list[str]]:
    rows = []
    H, D = 64, 128
    slope = build_slopes(H, 40, 80).to(DEVICE)
    for B in GPU_DECODE:
        q, k, v = (torch.randn(B, H, D, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))
        state = torch.randn(B, H, D, D, device=DEVICE) * 0.01
        slots = torch.randperm(B, device=DEVICE)
        floor = B * H * DECODE_BYTES_PER_SEQ_HEAD / COPY_BYTES_PER_S * 1e3
        t_ours = gpu_ms(lambda: lightning_attn_decode(q, k, v, slope, state, slots))
        t_fla = gpu_ms(lambda: fla_recurrent(
            q[:, None], k[:, None], v[:, None], g_gamma=-slope, scale=1.0, initial_state=state,
            output_final_state=True)) if fla_recurrent else None
        rows.append([f"decode B{B} H{H}", fmt(t_ours), fmt(t_fla),
                     fmt(t_ours / t_fla if t_fla else None, ".2f"), "-", fmt(floor),
                     fmt(100 * floor / t_ours, ".0f")])
    return rows


def run_gpu(quick: bool) -> None:
    fla_chunk, fla_recurrent = load_fla()
    print(f"GPU: {torch.cuda.get_device_name()}; bf16, D 128, layer-40 slopes of the 64-head "
          f"80-layer schedule; median ms of triton.testing.do_bench")
    if fla_chunk is None:
        print("fla (flash-linear-attention) is not installed: its columns are empty "
              "(pip install flash-linear-attention)")
    rows = bench_gpu_prefill(fla_chunk, quick) + bench_gpu_decode(fla_recurrent)
    print_table(["case", "ours ms", "fla ms", "ours/fla", "sdpa ms", "floor ms", "% floor"], rows)


def run_cpu(quick: bool) -> None:
    print("NO GPU PRESENT: the Triton kernels, fla and the H200 memory floor cannot be measured "
          "here.\nCPU comparison instead: the chunked PyTorch path (ours) against the token-by-"
          "token recurrence (naive) and torch SDPA causal;\nfp32, best of 5 (naive: 1 run), "
          f"{torch.get_num_threads()} threads; rel err = ours against the float64 recurrence.")
    H, D = 4, 64
    slope = build_slopes(H, 40, 80)
    rows = []
    for T in (512, 2048) if quick else (512, 2048, 8192):
        q, k, v = (torch.randn(1, T, H, D).mul_(0.5).requires_grad_() for _ in range(3))
        do = torch.randn_like(q)
        o_ref = naive_lightning_attn(*(x.detach().double() for x in (q, k, v)), slope)[0]
        err = ((chunk_lightning_attn(q, k, v, slope)[0] - o_ref).norm() / o_ref.norm()).item()
        fns = {"ours": lambda: chunk_lightning_attn(q, k, v, slope),
               "naive": lambda: naive_lightning_attn(q, k, v, slope),
               "sdpa": lambda: sdpa_causal(q, k, v)}
        for mode in ("fwd", "fwd+bwd"):
            ms = {name: cpu_ms(fn if mode == "fwd" else fwd_bwd(fn, [q, k, v], do),
                               reps=1 if name == "naive" else 5)
                  for name, fn in fns.items()
                  if not (name == "naive" and mode != "fwd" and T > NAIVE_MAX_BWD_T)}
            naive = ms.get("naive")
            rows.append([f"prefill {mode} B1 H{H} D{D} T{T}", fmt(ms["ours"]), fmt(naive),
                         fmt(ms["ours"] / naive if naive else None, ".3f"), fmt(ms["sdpa"]),
                         f"{err:.1e}" if mode == "fwd" else "-"])
    print_table(["case", "ours ms", "naive ms", "ours/naive", "sdpa ms", "rel err"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter cases")
    args = parser.parse_args()
    torch.manual_seed(0)
    if torch.cuda.is_available():
        run_gpu(args.quick)
    else:
        run_cpu(args.quick)


if __name__ == "__main__":
    main()
