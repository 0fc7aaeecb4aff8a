"""One source's cursor: (epoch, position in that epoch's order), and the block of records under it."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from svc_source.order import EpochOrder

Reader = Callable[[int, int], Iterator[tuple[int, Any]]]  # rows start..stop: (row, item)
Ahead = Callable[[int, int], None]  # rows start..stop will be read next: start on them


class Cursor:
    """Draws the rows of one source in its seeded order, epoch after epoch, a block read at a time.

    read(start, stop): the block's (row, item) pairs; the source's records by default (the service
    passes one that gives each row's prompt body, m1flow.source.prompt_bodies). ahead(start, stop):
    told the next block's rows as soon as one is loaded (svc_source.reader reads it meanwhile)."""

    def __init__(self, source: Any, seed: int, block: int, max_epochs: int = 0,
                 epoch: int = 0, position: int = 0, read: Reader | None = None, ahead: Ahead | None = None) -> None:
        self.source, self.name = source, source.name
        self.n = len(source)
        self.seed, self.block, self.max_epochs = seed, block, max_epochs
        self.epoch, self.position = epoch, position
        self.read, self.ahead = read or source.records, ahead
        self._order: EpochOrder | None = None
        self._lo = self._hi = 0  # the positions the held block covers in its epoch
        self._held: list[tuple[int, Any]] = []  # (row, item) by offset in the block's order
        self._roll()
        if ahead is not None and not self.exhausted:  # the first block, read while the service starts
            ahead(*self.order().bounds(self.order().locate(self.position)[0]))

    @property
    def exhausted(self) -> bool:
        return self.n == 0 or bool(self.max_epochs and self.epoch >= self.max_epochs)

    def _roll(self) -> None:
        """Past an epoch's end: the next epoch, position 0."""
        while self.n and self.position >= self.n:
            self.epoch, self.position = self.epoch + 1, self.position - self.n

    def order(self) -> EpochOrder:
        if self._order is None or self._order.epoch != self.epoch:
            self._order, self._lo, self._hi = EpochOrder(self.n, self.seed, self.name, self.epoch, self.block), 0, 0
        return self._order

    def skip(self) -> None:
        """Advance past one draw without reading it (a draw already published before a restart)."""
        self.position += 1
        if self.position >= self.n:
            self._roll()

    def switch(self, source: Any, read: Reader, ahead: Ahead | None) -> None:
        """Read from another source of the same rows from the next draw on (a generator at another
        level): the position stays, the block held is dropped and read again from it."""
        self.source, self.read, self.ahead = source, read, ahead
        self._lo = self._hi = 0
        self._held = []

    def draw(self) -> tuple[int, int, int, Any]:
        """(epoch, position, row, record or RowError) of the next draw, and advance."""
        position = self.position
        order = self.order()
        if not self._lo <= position < self._hi:
            self._load(order, position)
        row, item = self._held[position - self._lo]
        out = (self.epoch, position, row, item)
        self.skip()
        return out

    def _load(self, order: EpochOrder, position: int) -> None:
        k, offset = order.locate(position)
        start, stop, inner = order.block_rows(k)
        rows = self._read(start, stop)
        self._lo = position - offset
        self._hi = self._lo + (stop - start)
        self._held = [(start + i, rows.get(start + i)) for i in inner.tolist()]
        if any(item is None for _, item in self._held):
            why = rows.get(None) or "the reader returned no row"
            self._held = [(row, OSError(f"{self.name}:{row}: row: not read ({why})") if item is None else item)
                          for row, item in self._held]
        if self.ahead is not None:
            following = self._following(order, k)
            if following is not None:
                self.ahead(*following)

    def _following(self, order: EpochOrder, k: int) -> tuple[int, int] | None:
        """The rows of the block after block k: the epoch's next, or the next epoch's first."""
        if k + 1 < len(order.blocks):
            return order.bounds(k + 1)
        if self.max_epochs and order.epoch + 1 >= self.max_epochs:
            return None
        return EpochOrder(self.n, self.seed, self.name, order.epoch + 1, self.block).bounds(0)

    def _read(self, start: int, stop: int) -> dict[Any, Any]:
        """The block's records; a file that breaks mid-read leaves the rows it did not give as bad
        rows (the failure under the key None)."""
        rows: dict[Any, Any] = {}
        try:
            for row, item in self.read(start, stop):
                rows[row] = item
        except (OSError, ValueError) as exc:
            rows[None] = f"{type(exc).__name__}: {exc}"
        return rows
