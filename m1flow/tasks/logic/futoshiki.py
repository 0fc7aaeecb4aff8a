"""Futoshiki: a latin square with a few givens and inequalities between neighbouring cells."""
from __future__ import annotations

from m1flow.tasks.logic.base import LogicTask
from m1flow.tasks.logic.grids import (blank_out, format_grid, givens_violation,
                                              latin_violation, parse_int_grid, random_latin_square)

LEVELS = {1: (4, 3, 4), 2: (5, 3, 6), 3: (6, 4, 9)}  # size, givens, inequalities


class Futoshiki(LogicTask):
    name = "futoshiki"

    def build(self, rng, level):
        n, keep, count = LEVELS[level]
        square = random_latin_square(rng, n)
        givens = blank_out(rng, square, keep)
        edges = [(r, c, r, c + 1) for r in range(n) for c in range(n - 1)]
        edges += [(r, c, r + 1, c) for r in range(n - 1) for c in range(n)]
        less = []
        for r1, c1, r2, c2 in rng.sample(edges, count):
            small, big = ((r1, c1), (r2, c2)) if square[r1][c1] < square[r2][c2] else ((r2, c2), (r1, c1))
            less.append([*small, *big])
        clues = "\n".join(f"({a + 1},{b + 1}) < ({c + 1},{d + 1})" for a, b, c, d in less)
        question = (f"Fill the {n}x{n} grid with digits 1-{n} so that each row and column holds each digit "
                    f"once. Empty cells are '.':\n{format_grid(givens, blank=0)}\n"
                    f"Inequalities between cells (row,column), 1-based:\n{clues}\n\n"
                    f"Answer with the full grid: {n} lines of {n} digits separated by spaces.")
        return question, format_grid(square), {"size": n, "givens": givens, "less": less}

    def check(self, meta, answer):
        grid = parse_int_grid(answer, meta["size"])
        problem = givens_violation(grid, meta["givens"]) or latin_violation(grid)
        if problem:
            return problem
        for a, b, c, d in meta["less"]:
            if not grid[a][b] < grid[c][d]:
                return f"({a + 1},{b + 1}) < ({c + 1},{d + 1}) does not hold"
        return None
