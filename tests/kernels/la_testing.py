"""Shared helpers of the lightning attention tests (inputs, slopes, the float64 reference)."""
import os

import torch

from kernels.lightning_attn import build_slopes, naive_lightning_attn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def triton_usable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


def m1_slopes(heads: int) -> torch.Tensor:
    """`heads` slopes taken from the real 64-head, 80-layer schedule, from the largest (layer 0,
    head 0) to the smallest of a lightning layer (layer 78, head 63, about 5e-5); on DEVICE."""
    picks = [(0, 0), (78, 63), (40, 31), (0, 63), (78, 0), (20, 10), (60, 50), (5, 5)]
    return torch.stack([build_slopes(64, layer, 80)[h] for layer, h in picks[:heads]]).to(DEVICE)


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double().cpu(), ref.double().cpu()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def rand(*shape: int, dtype: torch.dtype = torch.float32, scale: float = 0.5) -> torch.Tensor:
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype).to(DEVICE)


def reference(q, k, v, slope, s0=None):
    """float64 recurrence on the same (already rounded) inputs, on the CPU."""
    s0 = None if s0 is None else s0.double().cpu()
    return naive_lightning_attn(q.double().cpu(), k.double().cpu(), v.double().cpu(), slope.cpu(),
                                s0, output_final_state=True)
