"""Training-mode vs inference-mode token probabilities, and the LM-head precision switch.

The report found that the probabilities the trainer computes for the rollout's sampled tokens
disagreed with those the rollout engine recorded (Pearson about 0.9x), and traced it to the LM
head: its outputs have large magnitudes, so a bf16 head rounds logits by a sizeable fraction of a
nat. Running the head in fp32 raised the correlation to 0.99x and reward started to grow. The
learner tracks the correlation on every batch and can run the head in either precision.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from m1flow.rl.mismatch import ROW_COLUMNS, row_sums

HeadDtype = Literal["fp32", "bf16"]
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def cast_head(hidden: Tensor, weight: Tensor, head_dtype: HeadDtype = "fp32") -> tuple[Tensor, Tensor]:
    """Hidden states and head weight in the precision the head matmul runs in (differentiable casts)."""
    dtype = _DTYPES[head_dtype]
    return hidden.to(dtype), weight.to(dtype)


_MOMENTS = [ROW_COLUMNS.index(c) for c in ("measured", "x", "y", "xx", "yy", "xy")]
_COL = {name: i for i, name in enumerate(ROW_COLUMNS)}


def correlation_moments(train_logp: Tensor, infer_logp: Tensor, mask: Tensor) -> Tensor:
    """Sums (n, x, y, xx, yy, xy) of the masked token probabilities; add them across ranks or batches."""
    return row_sums(None, train_logp, infer_logp, mask, mask).sum(0)[_MOMENTS]


def pearson_from_moments(m: Tensor) -> float:
    n, sx, sy, sxx, syy, sxy = (float(v) for v in m)
    if n < 2:
        return float("nan")
    cov, vx, vy = sxy - sx * sy / n, sxx - sx * sx / n, syy - sy * sy / n
    return cov / (vx * vy) ** 0.5 if vx > 0 and vy > 0 else float("nan")


def prob_correlation(train_logp: Tensor, infer_logp: Tensor, mask: Tensor) -> float:
    """Pearson correlation of the token probabilities exp(logp) over the masked tokens."""
    return pearson_from_moments(correlation_moments(train_logp, infer_logp, mask))


def mismatch_values(sums: Tensor, corrected: bool) -> dict[str, float]:
    """The train/inference mismatch of summed per-response rows (m1flow.rl.mismatch.row_sums): the
    probability correlation, KL(rollout || train) estimates k1 and k3 per measured token, and, when a
    correction is set, the shares of tokens and of responses it truncated or dropped."""
    col = {name: float(sums[i]) for name, i in _COL.items()}
    out = {"train_infer_tokens": col["measured"]}  # how many tokens it was measured on
    corr = pearson_from_moments(sums[_MOMENTS])
    if not math.isnan(corr):  # no value without a sample of the trained version: no point
        out["train_infer_corr"] = corr
    if col["measured"] > 0:
        out |= {"train_infer_k1": col["k1"] / col["measured"], "train_infer_k3": col["k3"] / col["measured"]}
    if corrected and col["tokens"] > 0:
        out |= {f"correction_{name}_frac": col[name] / col["tokens"] for name in ("truncated", "dropped")}
        out |= {f"correction_{name}_frac": col[name] / col["sequences"] for name in ("truncated_seq", "dropped_seq")}
    return out
