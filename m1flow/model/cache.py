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
    """Keys (after RoPE) and values of one softmax layer, in a buffer that doubles when full."""

    k: torch.Tensor  # [B, Hkv, capacity, d]
    v: torch.Tensor
    length: int = 0

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

    def repeat_interleave(self, n: int) -> None:
        self.k = self.k[:, :, : self.length].repeat_interleave(n, dim=0)
        self.v = self.v[:, :, : self.length].repeat_interleave(n, dim=0)


class HybridCache:
    """Per-layer caches plus the number of tokens seen (all rows share one position)."""

    def __init__(self, layers: list[LightningState | KVCache]) -> None:
        self.layers = layers
        self.seq_len = 0

    @property
    def batch_size(self) -> int:
        return self.layers[0].tensor.shape[0]

    def select(self, rows: torch.Tensor | list[int]) -> None:
        """Keep only these batch rows (finished samples leave the batch)."""
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.layers[0].tensor.device)
        for layer in self.layers:
            layer.select(rows)

    def repeat_interleave(self, n: int) -> None:
        """Turn each row into n consecutive copies: prefill a prompt once, then sample n times."""
        for layer in self.layers:
            layer.repeat_interleave(n)
