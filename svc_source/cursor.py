"""One source's cursor: (epoch, position in that epoch's order), and the block of records under it."""
from __future__ import annotations

from typing import Any

from svc_source.order import EpochOrder


class Cursor:
    """Draws the rows of one source in its seeded order, epoch after epoch, a block read at a time."""

    def __init__(self, source: Any, seed: int, block: int, max_epochs: int = 0,
                 epoch: int = 0, position: int = 0) -> None:
        self.source, self.name = source, source.name
        self.n = len(source)
        self.seed, self.block, self.max_epochs = seed, block, max_epochs
        self.epoch, self.position = epoch, position
        self._order: EpochOrder | None = None
        self._held: tuple[int, dict[int, Any]] | None = None  # (block index, row -> record or error)
        self._roll()

    @property
    def exhausted(self) -> bool:
        return self.n == 0 or bool(self.max_epochs and self.epoch >= self.max_epochs)

    def _roll(self) -> None:
        """Past an epoch's end: the next epoch, position 0."""
        while self.n and self.position >= self.n:
            self.epoch, self.position = self.epoch + 1, self.position - self.n

    def order(self) -> EpochOrder:
        if self._order is None or self._order.epoch != self.epoch:
            self._order, self._held = EpochOrder(self.n, self.seed, self.name, self.epoch, self.block), None
        return self._order

    def skip(self) -> None:
        """Advance past one draw without reading it (a draw already published before a restart)."""
        self.position += 1
        self._roll()

    def draw(self) -> tuple[int, int, int, Any]:
        """(epoch, position, row, record or RowError) of the next draw, and advance."""
        order = self.order()
        k, offset = order.locate(self.position)
        if self._held is None or self._held[0] != k:
            start, stop, inner = order.block_rows(k)
            self._held = (k, {"inner": inner, "start": start, **self._read(start, stop)})
        held = self._held[1]
        row = held["start"] + int(held["inner"][offset])
        item = held["rows"].get(row)
        if item is None:
            item = OSError(f"{self.name}:{row}: row: not read ({held['failure'] or 'the reader returned no row'})")
        out = (self.epoch, self.position, row, item)
        self.skip()
        return out

    def _read(self, start: int, stop: int) -> dict[str, Any]:
        """The block's records; a file that breaks mid-read leaves the rows it did not give as bad rows."""
        rows: dict[int, Any] = {}
        failure = ""
        try:
            for row, item in self.source.records(start, stop):
                rows[row] = item
        except (OSError, ValueError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        return {"rows": rows, "failure": failure}
