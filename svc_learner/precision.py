"""Training-mode vs inference-mode token probabilities, and the LM-head precision switch.

The report found that the probabilities the trainer computes for the rollout's sampled tokens
disagreed with those the rollout engine recorded (Pearson about 0.9x), and traced it to the LM
head: its outputs have large magnitudes, so a bf16 head rounds logits by a sizeable fraction of a
nat. Running the head in fp32 raised the correlation to 0.99x and reward started to grow. The
learner tracks the correlation on every batch and can run the head in either precision.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

HeadDtype = Literal["fp32", "bf16"]
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def cast_head(hidden: Tensor, weight: Tensor, head_dtype: HeadDtype = "fp32") -> tuple[Tensor, Tensor]:
    """Hidden states and head weight in the precision the head matmul runs in (differentiable casts)."""
    dtype = _DTYPES[head_dtype]
    return hidden.to(dtype), weight.to(dtype)


def correlation_moments(train_logp: Tensor, infer_logp: Tensor, mask: Tensor) -> Tensor:
    """Sums (n, x, y, xx, yy, xy) of the masked token probabilities; add them across ranks or batches."""
    sel = mask.bool()
    x = train_logp.detach()[sel].double().exp()
    y = infer_logp.detach()[sel].double().exp()
    return torch.stack([torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device),
                        x.sum(), y.sum(), (x * x).sum(), (y * y).sum(), (x * y).sum()])


def pearson_from_moments(m: Tensor) -> float:
    n, sx, sy, sxx, syy, sxy = (float(v) for v in m)
    if n < 2:
        return float("nan")
    cov, vx, vy = sxy - sx * sy / n, sxx - sx * sx / n, syy - sy * sy / n
    return cov / (vx * vy) ** 0.5 if vx > 0 and vy > 0 else float("nan")


def prob_correlation(train_logp: Tensor, infer_logp: Tensor, mask: Tensor) -> float:
    """Pearson correlation of the token probabilities exp(logp) over the masked tokens."""
    return pearson_from_moments(correlation_moments(train_logp, infer_logp, mask))
