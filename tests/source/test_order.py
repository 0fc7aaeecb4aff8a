"""The draw order: every row once per epoch, the same for the same seeds, resumable anywhere."""
from __future__ import annotations

import collections

import pytest

from svc_source.cursor import Cursor
from svc_source.order import EpochOrder, Interleave


@pytest.mark.parametrize("n,block", [(1, 4), (10, 4), (4096, 512), (1001, 100), (7, 7)])
def test_an_epoch_draws_every_row_once(n, block):
    order = EpochOrder(n, seed=3, source="s", epoch=0, block=block)
    assert sorted(order.row_at(p) for p in range(n)) == list(range(n))


def test_order_is_a_function_of_seed_source_and_epoch():
    rows = lambda seed, source, epoch: [EpochOrder(1000, seed, source, epoch, 64).row_at(p) for p in range(1000)]  # noqa: E731
    assert rows(1, "a", 0) == rows(1, "a", 0)
    assert rows(1, "a", 0) != rows(1, "a", 1) != rows(2, "a", 0)
    assert rows(1, "a", 0) != rows(1, "b", 0)
    assert rows(1, "a", 0) != list(range(1000))


class Rows:
    """A TaskSource stand-in: record i is ("rec", i); counts the rows it was asked for."""

    def __init__(self, n: int, name: str = "rows") -> None:
        self.n, self.name, self.read = n, name, 0

    def __len__(self) -> int:
        return self.n

    def records(self, start: int = 0, stop: int | None = None):
        for i in range(start, min(stop or self.n, self.n)):
            self.read += 1
            yield i, ("rec", i)


def test_a_cursor_resumed_at_a_position_continues_the_same_sequence_reading_one_block():
    whole = Cursor(Rows(50), seed=5, block=8)
    sequence = [whole.draw() for _ in range(120)]  # 2.4 epochs
    assert [d[:2] for d in sequence[:3]] == [(0, 0), (0, 1), (0, 2)]
    assert {d[0] for d in sequence} == {0, 1, 2}
    for epoch in (0, 1):
        assert sorted(d[2] for d in sequence if d[0] == epoch) == list(range(50))
    source = Rows(50)
    resumed = Cursor(source, seed=5, block=8, epoch=1, position=13)
    assert [resumed.draw() for _ in range(120 - 63)] == sequence[63:]
    assert source.read <= 8 * 9  # block by block from the resume point, not the rows before it


def test_max_epochs_exhausts_a_cursor():
    cursor = Cursor(Rows(5), seed=0, block=2, max_epochs=2)
    for _ in range(10):
        assert not cursor.exhausted
        cursor.draw()
    assert cursor.exhausted


def test_interleave_follows_the_weights_and_is_deterministic():
    mix = Interleave([1.0, 3.0], seed=7)
    draws = [mix.choice(d) for d in range(20_000)]
    assert draws == [Interleave([1.0, 3.0], seed=7).choice(d) for d in range(20_000)]
    share = collections.Counter(draws)[1] / len(draws)
    assert 0.73 < share < 0.77
    assert draws != [Interleave([1.0, 3.0], seed=8).choice(d) for d in range(20_000)]
    assert mix.choice(5, exhausted=[False, True]) == 0
    assert mix.choice(5, exhausted=[True, True]) is None


@pytest.mark.parametrize("weights", [[], [0.0], [1.0, -1.0]])
def test_interleave_refuses_weights_that_draw_nothing(weights):
    with pytest.raises(ValueError, match="weights"):
        Interleave(weights, seed=0)
