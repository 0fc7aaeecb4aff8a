"""One learner step's statistics, in one object.

The update loop adds each minibatch's (its policy statistics weighted by its tokens, its loss, its
gradient norm) as tensors where they were computed, and `reduce`s them once: one sum over the ranks,
one device sync. The trainer then notes what the step was made of (the batch's groups and rewards, the
records it consumed, the drift warning) and the service where its time went; the whole (`values`, a
plain dict of name -> float, which is what `run_updates` returns) is what `policy` announces,
`metrics` carries and `LearnerService.Status` reports.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

import torch
from torch import Tensor

from m1flow.rl.mismatch import ROW_COLUMNS

from .precision import mismatch_values

_LAST_ABS_LOG_RATIO, _LAST_NUM_TOKENS = "_last_abs_log_ratio", "_last_num_tokens"
_PER_UPDATE = ("loss", "grad_norm")  # means over the updates; num_tokens a total; the rest per token


class Ranks(Protocol):
    def sum(self, x: Tensor) -> Tensor: ...


class StepStats(Mapping[str, float]):
    """The step's statistics (read as a mapping once reduced), and the minibatch sums that make them."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self._sums: dict[str, Tensor | float] = {}
        self._rows: Tensor | None = None
        self.corrected = False  # a mismatch correction acted on the batch
        self.rows: Tensor | None = None  # once reduced: the batch's per-response mismatch sums, in batch order

    def __getitem__(self, key: str) -> float:
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def add(self, minibatch: Mapping[str, Tensor], loss: Tensor, grad_norm: Tensor | float, last: bool) -> None:
        """One minibatch's policy statistics (m1flow.rl.objectives.policy_stats), loss and gradient
        norm; `last`: the most off-policy minibatch (every other update came before it), whose drift
        svc_learner.drift watches."""
        n_tok = minibatch["num_tokens"]
        for key, value in minibatch.items():
            self._add(key, value if key == "num_tokens" else value * n_tok)
        self._add("loss", loss.detach())
        self._add("grad_norm", grad_norm)
        if last:
            self._sums[_LAST_ABS_LOG_RATIO] = (minibatch["abs_log_ratio"] * n_tok).detach()
            self._sums[_LAST_NUM_TOKENS] = n_tok.detach()

    def mismatch(self, rows: Tensor, index: Tensor, batch_size: int, corrected: bool) -> None:
        """The per-response train/inference mismatch sums (m1flow.rl.mismatch.row_sums) of the batch's
        rows `index`; `corrected`: a correction acted on them (its shares are then published)."""
        if self._rows is None:
            self._rows = torch.zeros(batch_size, len(ROW_COLUMNS), dtype=torch.float64, device=rows.device)
        self._rows[index.to(rows.device)] = rows
        self.corrected = corrected

    def _add(self, key: str, value: Tensor | float) -> None:
        previous = self._sums.get(key, 0.0)
        self._sums[key] = previous + (value.detach() if isinstance(value, Tensor) else value)

    def reduce(self, updates: int, ranks: Ranks, device: torch.device) -> dict[str, float]:
        """The sums over the ranks, once, as the step's statistics (`values`, now filled)."""
        keys = sorted(self._sums)
        totals = ranks.sum(torch.stack([torch.as_tensor(self._sums[k], dtype=torch.float64, device=device)
                                        for k in keys]))
        reduced = dict(zip(keys, totals.tolist()))
        self._sums = {}
        last_abs, last_tokens = reduced.pop(_LAST_ABS_LOG_RATIO), reduced.pop(_LAST_NUM_TOKENS)
        n_tok = max(reduced["num_tokens"], 1.0)
        out = self.values
        out["updates"] = updates
        for key, value in reduced.items():
            out[key] = value / updates if key in _PER_UPDATE else value if key == "num_tokens" else value / n_tok
        out["drift_abs_log_ratio_last"] = last_abs / max(last_tokens, 1.0)
        out["pos_clip_high_share"] = out["pos_clip_high_frac"] / out["pos_frac"] if out["pos_frac"] > 0 else 0.0
        if self._rows is not None:
            self.rows = ranks.sum(self._rows).cpu()
            self._rows = None
            out.update(mismatch_values(self.rows.sum(0), self.corrected))
        return out

    def note(self, values: Mapping[str, float] = {}, **more: float) -> None:  # noqa: B006 - read only
        """What the step was made of, or where its time went, beside the update's statistics."""
        self.values.update(values, **more)
