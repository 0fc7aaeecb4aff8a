"""Sudoku on 4x4, 6x6 and 9x9 boards (level 1, 2, 3)."""
from __future__ import annotations

import random

from m1flow.tasks.logic.base import LogicTask
from m1flow.tasks.logic.grids import (blank_out, format_grid, givens_violation,
                                              latin_violation, parse_int_grid)

BOXES = {1: (2, 2), 2: (2, 3), 3: (3, 3)}  # box rows x box columns
KEEP_FRACTION = {1: 0.5, 2: 0.45, 3: 0.4}


def solved_board(rng: random.Random, br: int, bc: int) -> list[list[int]]:
    """A valid full board: the banded base pattern with bands, rows, stacks, columns, digits shuffled."""
    n = br * bc

    def shuffled_lines(groups: int, size: int) -> list[int]:
        order = rng.sample(range(groups), groups)
        return [g * size + i for g in order for i in rng.sample(range(size), size)]

    rows, cols = shuffled_lines(bc, br), shuffled_lines(br, bc)
    digits = rng.sample(range(1, n + 1), n)
    return [[digits[(bc * (r % br) + r // br + c) % n] for c in cols] for r in rows]


def box_violation(grid: list[list[int]], br: int, bc: int) -> str | None:
    n = br * bc
    for top in range(0, n, br):
        for left in range(0, n, bc):
            box = {grid[r][c] for r in range(top, top + br) for c in range(left, left + bc)}
            if box != set(range(1, n + 1)):
                return f"box at ({top + 1},{left + 1}) repeats a digit"
    return None


class Sudoku(LogicTask):
    name = "sudoku"

    def build(self, rng, level):
        br, bc = BOXES[level]
        n = br * bc
        board = solved_board(rng, br, bc)
        givens = blank_out(rng, board, round(KEEP_FRACTION[level] * n * n))
        question = (f"Fill in the {n}x{n} sudoku so that every row, every column and every {br}x{bc} box "
                    f"holds each digit 1-{n} exactly once. Empty cells are shown as '.'.\n\n"
                    f"{format_grid(givens, blank=0)}\n\n"
                    f"Answer with the full grid: {n} lines of {n} digits separated by spaces.")
        return question, format_grid(board), {"size": n, "box": [br, bc], "givens": givens}

    def check(self, meta, answer):
        grid = parse_int_grid(answer, meta["size"])
        return (givens_violation(grid, meta["givens"]) or latin_violation(grid)
                or box_violation(grid, *meta["box"]))
