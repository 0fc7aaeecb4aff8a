"""Inference cache of the hybrid model: a growing KV cache for each softmax layer and a constant-size
fp32 state [B, H, d, d] for each lightning layer (the reason long rollouts stay cheap)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LightningState:
    """Recurrent state S of one lightning layer; fp32 because bf16 loses small increments."""

    state: torch.Tensor  # [B, H, d, d] fp32

    @property
    def tensor(self) -> torch.Tensor:
        return self.state

    def select(self, rows: torch.Tensor) -> None:
        self.state = self.state.index_select(0, rows)

    def repeat_interleave(self, n: int) -> None:
        self.state = self.state.repeat_interleave(n, dim=0)


@dataclass
class KVCache:
    """Keys (after RoPE) and values of one softmax layer, in a buffer that doubles when full.

    Rows merged from prompts of different lengths are left-aligned to a common length: row b's
    first `pad[b]` slots hold nothing and are masked out of attention (None: no row is padded)."""

    k: torch.Tensor  # [B, Hkv, capacity, d]
    v: torch.Tensor
    length: int = 0
    pad: torch.Tensor | None = None  # [B] long

    @property
    def tensor(self) -> torch.Tensor:
        return self.k

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, Hkv, T, d] after the cached tokens; return all keys and values so far."""
        end = self.length + k.shape[2]
        if end > self.k.shape[2]:
            self._grow(max(end, 2 * self.k.shape[2], 16))
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def _grow(self, capacity: int) -> None:
        b, h, _, d = self.k.shape
        k = self.k.new_empty(b, h, capacity, d)
        v = self.v.new_empty(b, h, capacity, d)
        k[:, :, : self.length] = self.k[:, :, : self.length]
        v[:, :, : self.length] = self.v[:, :, : self.length]
        self.k, self.v = k, v

    def select(self, rows: torch.Tensor) -> None:
        self.k = self.k[:, :, : self.length].index_select(0, rows)
        self.v = self.v[:, :, : self.length].index_select(0, rows)
        if self.pad is not None:
            self.pad = self.pad.index_select(0, rows)

    def repeat_interleave(self, n: int) -> None:
        self.k = self.k[:, :, : self.length].repeat_interleave(n, dim=0)
        self.v = self.v[:, :, : self.length].repeat_interleave(n, dim=0)
        if self.pad is not None:
            self.pad = self.pad.repeat_interleave(n, dim=0)

    def key_mask(self) -> torch.Tensor | None:
        """[B, 1, 1, length] True where a key exists, or None when no row is padded."""
        if self.pad is None:
            return None
        return (torch.arange(self.length, device=self.k.device)[None, :] >= self.pad[:, None])[:, None, None, :]

    @staticmethod
    def merge(parts: list["KVCache"]) -> "KVCache":
        """One batch from caches of different lengths, each row left-padded to the longest."""
        length = max(p.length for p in parts)
        b, h, _, d = parts[0].k.shape
        rows = sum(p.k.shape[0] for p in parts)
        k, v = parts[0].k.new_zeros(rows, h, length, d), parts[0].v.new_zeros(rows, h, length, d)
        pads, row = [], 0
        for p in parts:
            n, shift = p.k.shape[0], length - p.length
            k[row : row + n, :, shift:] = p.k[:, :, : p.length]
            v[row : row + n, :, shift:] = p.v[:, :, : p.length]
            own = p.pad if p.pad is not None else torch.zeros(n, dtype=torch.long, device=k.device)
            pads.append(own + shift)
            row += n
        return KVCache(k, v, length, torch.cat(pads))


class HybridCache:
    """Per-layer caches plus the number of tokens stored per row (seq_len) and, for batches merged
    from prompts of different lengths, how many of those leading slots are padding per row."""

    def __init__(self, layers: list[LightningState | KVCache]) -> None:
        self.layers = layers
        self.seq_len = 0
        self.pad: torch.Tensor | None = None  # [B] long; None: every row starts at slot 0

    def positions(self) -> int | torch.Tensor:
        """Position of the next token: one int for all rows, or [B] when rows were merged."""
        return self.seq_len if self.pad is None else self.seq_len - self.pad

    @classmethod
    def merge(cls, caches: list["HybridCache"]) -> "HybridCache":
        """Decode several prompts' caches as one batch (rows in the order given)."""
        layers: list[LightningState | KVCache] = []
        for parts in zip(*(c.layers for c in caches)):
            if isinstance(parts[0], LightningState):
                layers.append(LightningState(torch.cat([p.state for p in parts])))
            else:
                layers.append(KVCache.merge(list(parts)))
        merged = cls(layers)
        merged.seq_len = max(c.seq_len for c in caches)
        device = caches[0].layers[0].tensor.device
        merged.pad = torch.cat([(c.pad if c.pad is not None else torch.zeros(c.batch_size, dtype=torch.long, device=device))
                                + merged.seq_len - c.seq_len for c in caches])
        return merged

    @property
    def batch_size(self) -> int:
        return self.layers[0].tensor.shape[0]

    def select(self, rows: torch.Tensor | list[int]) -> None:
        """Keep only these batch rows (finished samples leave the batch)."""
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.layers[0].tensor.device)
        for layer in self.layers:
            layer.select(rows)
        if self.pad is not None:
            self.pad = self.pad.index_select(0, rows)

    def repeat_interleave(self, n: int) -> None:
        """Turn each row into n consecutive copies: prefill a prompt once, then sample n times."""
        for layer in self.layers:
            layer.repeat_interleave(n)
        if self.pad is not None:
            self.pad = self.pad.repeat_interleave(n, dim=0)
