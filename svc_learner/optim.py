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


def make_optimizer(params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, lr=lr, betas=BETAS, eps=EPS, weight_decay=weight_decay)


def clip_gradients(params: Iterable[torch.nn.Parameter], max_norm: float | None) -> float:
    """Clip the global gradient norm to max_norm (None: only measure); returns the norm before clipping."""
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    limit = float("inf") if max_norm is None else max_norm
    return float(torch.nn.utils.clip_grad_norm_(grads, limit))
