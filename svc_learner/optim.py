"""The report's optimiser settings.

Gradients in RL on long outputs span 1e-18 to 1e-5 and are weakly correlated between steps; AdamW
with its usual beta2 = 0.999 and eps = 1e-8 did not converge there (eps swamps tiny gradients,
a long beta2 memory lags). The report uses beta2 = 0.95 and eps = 1e-15.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

BETAS = (0.9, 0.95)
EPS = 1e-15


def make_optimizer(params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0,
                   eps: float = EPS) -> torch.optim.AdamW:
    """AdamW with the report's betas. With eps = 1e-15 the first steps are nearly sign(grad) x lr,
    so a parameter whose gradient is float noise around 0 still moves by about lr."""
    return torch.optim.AdamW(params, lr=lr, betas=BETAS, eps=eps, weight_decay=weight_decay)


def clip_gradients(params: Iterable[torch.nn.Parameter], max_norm: float | None) -> float:
    """Clip the global gradient norm to max_norm (None: only measure); returns the norm before clipping."""
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    limit = float("inf") if max_norm is None else max_norm
    norm = torch.nn.utils.clip_grad_norm_(grads, limit)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # FSDP: a sharded norm
