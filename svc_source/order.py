"""The order rows are drawn in: a seeded block shuffle per source and epoch, and a seeded weighted
interleave of the sources. Both are pure functions of their seeds and a position, so a restart
resumes at a position without re-reading what came before, and a replay repeats the sequence.

Block shuffle: the rows are cut into blocks of B; an epoch visits the blocks in a permutation
seeded by (seed, source, epoch) and the rows of each block in a permutation seeded by (seed,
source, epoch, block). Memory is one block of records plus one int per block (10M rows, B=4096:
2442 ints), and a block is one contiguous `records(start, stop)` read. Rows more than a block apart
never swap their relative order within an epoch's block sequence, which is the usual price
(tf.data's shuffle buffer, webdataset's shards) for reading a 10M-row file sequentially.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

INTERLEAVE_CHUNK = 4096  # draws whose choices are made together


def _rng(*parts: int | str) -> np.random.Generator:
    """A generator seeded by a tuple of ints and strings (strings through a stable hash)."""
    words = [p if isinstance(p, int) else int.from_bytes(hashlib.sha1(p.encode()).digest()[:8], "big") for p in parts]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([abs(w) for w in words])))


class EpochOrder:
    """The seeded order of rows 0..n-1 for one (source, epoch)."""

    def __init__(self, n: int, seed: int, source: str, epoch: int, block: int) -> None:
        self.n, self.seed, self.source, self.epoch, self.block = n, seed, source, epoch, block
        blocks = -(-n // block) if n else 0
        self.blocks = _rng(seed, source, epoch).permutation(blocks) if blocks else np.zeros(0, dtype=np.int64)
        sizes = np.minimum(block, n - self.blocks * block)
        self.starts = np.concatenate([[0], np.cumsum(sizes)])  # position of each shuffled block's first row

    def __len__(self) -> int:
        return self.n

    def locate(self, position: int) -> tuple[int, int]:
        """(index of the shuffled block holding `position`, offset inside it)."""
        k = int(np.searchsorted(self.starts, position, side="right")) - 1
        return k, position - int(self.starts[k])

    def bounds(self, k: int) -> tuple[int, int]:
        """Block k of the epoch's row range [start, stop)."""
        physical = int(self.blocks[k])
        return physical * self.block, min(self.n, (physical + 1) * self.block)

    def block_rows(self, k: int) -> tuple[int, int, np.ndarray]:
        """Block k of the epoch: its row range [start, stop) and the order of its rows (offsets)."""
        start, stop = self.bounds(k)
        return start, stop, _rng(self.seed, self.source, self.epoch, int(self.blocks[k])).permutation(stop - start)

    def row_at(self, position: int) -> int:
        """The row drawn at `position` (tests and the replay check; the service reads whole blocks)."""
        k, offset = self.locate(position)
        start, _, inner = self.block_rows(k)
        return start + int(inner[offset])


class Interleave:
    """Which source each draw takes from: a seeded choice by weight, made INTERLEAVE_CHUNK draws at
    a time, so draw d is a pure function of (seed, mixture version, d) and the weights."""

    def __init__(self, weights: Sequence[float], seed: int, mixture_version: int = 0) -> None:
        total = float(sum(weights))
        if not weights or total <= 0 or min(weights) < 0:
            raise ValueError(f"weights: need at least one, none negative, a positive sum; got {list(weights)}")
        self.p = np.asarray(weights, dtype=np.float64) / total
        self.seed, self.mixture_version = seed, mixture_version

    @lru_cache(maxsize=4)  # noqa: B019 - a few chunks of one long-lived object
    def _chunk(self, c: int) -> list[int]:
        if len(self.p) == 1:
            return [0] * INTERLEAVE_CHUNK
        return _rng(self.seed, "interleave", self.mixture_version, c).choice(
            len(self.p), INTERLEAVE_CHUNK, p=self.p).tolist()

    def choice(self, draw: int, exhausted: Sequence[bool] = ()) -> int | None:
        """The source of draw `draw`; an exhausted one passes to the next live one with a weight
        (None: all done, or only weight-0 sources left)."""
        i = self._chunk(draw // INTERLEAVE_CHUNK)[draw % INTERLEAVE_CHUNK]
        n = len(self.p)
        if n == 1:
            return None if exhausted and exhausted[0] else 0
        for step in range(n):
            j = (i + step) % n
            if self.p[j] > 0 and not (exhausted and exhausted[j]):
                return j
        return None
