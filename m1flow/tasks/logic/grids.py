"""Reading, writing and checking square grids, shared by the grid puzzles.

Why strict reading: a grid answer is only accepted as exactly n rows of n cells; anything else is a
format error rather than a guess at what the model meant.
"""
from __future__ import annotations

import random
import re

from m1flow.tasks.logic.base import FormatError

_DECORATION = re.compile(r"[\[\](),|]")


def _rows(text: str) -> list[list[str]]:
    lines = [_DECORATION.sub(" ", line).split() for line in text.strip().splitlines()]
    return [cells for cells in lines if cells]


def parse_int_grid(text: str, n: int) -> list[list[int]]:
    """n lines of n integers ('1 2 3 4', '1,2,3,4', or '1234' when n <= 9)."""
    rows = []
    for cells in _rows(text):
        if len(cells) == 1 and n <= 9 and len(cells[0]) == n:
            cells = list(cells[0])
        if len(cells) != n or not all(c.isdigit() for c in cells):
            raise FormatError(f"expected {n} integers per row, got {' '.join(cells)[:60]!r}")
        rows.append([int(c) for c in cells])
    if len(rows) != n:
        raise FormatError(f"expected {n} rows, got {len(rows)}")
    return rows


def parse_mark_grid(text: str, n: int, marked: str, empty: str) -> list[list[bool]]:
    """n lines of n cells, each one of the `marked` or `empty` characters (spaces optional)."""
    rows = []
    for cells in _rows(text):
        chars = list("".join(cells))
        if len(chars) != n or any(c not in marked + empty for c in chars):
            raise FormatError(f"expected {n} cells of {marked[0]!r}/{empty[0]!r} per row")
        rows.append([c in marked for c in chars])
    if len(rows) != n:
        raise FormatError(f"expected {n} rows, got {len(rows)}")
    return rows


def format_grid(grid: list[list[object]], blank: object = None, blank_as: str = ".") -> str:
    return "\n".join(" ".join(blank_as if v == blank else str(v) for v in row) for row in grid)


def latin_violation(grid: list[list[int]]) -> str | None:
    """None when every row and column holds 1..n once."""
    n = len(grid)
    want = set(range(1, n + 1))
    for i in range(n):
        if set(grid[i]) != want:
            return f"row {i + 1} is not a permutation of 1..{n}"
        if {grid[r][i] for r in range(n)} != want:
            return f"column {i + 1} is not a permutation of 1..{n}"
    return None


def givens_violation(grid: list[list[int]], givens: list[list[int]]) -> str | None:
    """None when every given (non-zero) cell is kept."""
    for r, row in enumerate(givens):
        for c, v in enumerate(row):
            if v and grid[r][c] != v:
                return f"given cell ({r + 1},{c + 1})={v} changed"
    return None


def random_latin_square(rng: random.Random, n: int) -> list[list[int]]:
    """A cyclic square with rows, columns and symbols shuffled."""
    rows, cols, symbols = list(range(n)), list(range(n)), list(range(1, n + 1))
    for seq in (rows, cols, symbols):
        rng.shuffle(seq)
    return [[symbols[(r + c) % n] for c in cols] for r in rows]


def blank_out(rng: random.Random, grid: list[list[int]], keep: int) -> list[list[int]]:
    """A copy with all but `keep` random cells set to 0."""
    n = len(grid)
    cells = [(r, c) for r in range(n) for c in range(n)]
    kept = set(rng.sample(cells, keep))
    return [[grid[r][c] if (r, c) in kept else 0 for c in range(n)] for r in range(n)]


def neighbours8(r: int, c: int, n: int) -> list[tuple[int, int]]:
    return [(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)
            if (dr or dc) and 0 <= r + dr < n and 0 <= c + dc < n]
