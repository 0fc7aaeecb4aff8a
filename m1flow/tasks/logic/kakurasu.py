"""Kakurasu: shade cells so each row's shaded column numbers and each column's shaded row numbers
add up to the clues. Often several shadings fit; any that meets every clue is accepted."""
from __future__ import annotations

from m1flow.tasks.logic.base import LogicTask
from m1flow.tasks.logic.grids import parse_mark_grid

LEVELS = {1: 4, 2: 5, 3: 6}
MARKED, EMPTY = "#Xx*1", ".0-"


def sums(grid: list[list[bool]]) -> tuple[list[int], list[int]]:
    n = len(grid)
    rows = [sum(c + 1 for c in range(n) if grid[r][c]) for r in range(n)]
    cols = [sum(r + 1 for r in range(n) if grid[r][c]) for c in range(n)]
    return rows, cols


class Kakurasu(LogicTask):
    name = "kakurasu"

    def build(self, rng, level):
        n = LEVELS[level]
        grid = [[rng.random() < 0.45 for _ in range(n)] for _ in range(n)]
        rows, cols = sums(grid)
        question = (f"Shade cells of a {n}x{n} grid. Columns and rows are numbered 1-{n}. A shaded cell adds "
                    "its column number to its row's total and its row number to its column's total.\n"
                    f"Row totals (top to bottom): {' '.join(map(str, rows))}\n"
                    f"Column totals (left to right): {' '.join(map(str, cols))}\n\n"
                    f"Answer with {n} lines of {n} characters: # for shaded, . for empty.")
        solution = "\n".join("".join("#" if v else "." for v in row) for row in grid)
        return question, solution, {"size": n, "rows": rows, "cols": cols}

    def check(self, meta, answer):
        rows, cols = sums(parse_mark_grid(answer, meta["size"], MARKED, EMPTY))
        if rows != meta["rows"]:
            return f"row totals {rows} != {meta['rows']}"
        if cols != meta["cols"]:
            return f"column totals {cols} != {meta['cols']}"
        return None
