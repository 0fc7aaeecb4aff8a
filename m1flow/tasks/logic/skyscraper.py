"""Skyscrapers: a latin square of heights; edge clues count the towers seen from that side."""
from __future__ import annotations

from m1flow.tasks.logic.base import LogicTask
from m1flow.tasks.logic.grids import format_grid, latin_violation, parse_int_grid, random_latin_square

LEVELS = {1: (4, 1.0), 2: (5, 0.8), 3: (6, 0.7)}  # size, share of edge clues shown
SIDES = ("top", "bottom", "left", "right")


def visible(heights: list[int]) -> int:
    seen, tallest = 0, 0
    for h in heights:
        if h > tallest:
            seen, tallest = seen + 1, h
    return seen


def lines_from(grid: list[list[int]], side: str) -> list[list[int]]:
    """The lines of towers as seen from one side, nearest tower first."""
    n = len(grid)
    columns = [[grid[r][c] for r in range(n)] for c in range(n)]
    return {"top": columns, "bottom": [col[::-1] for col in columns],
            "left": [row[:] for row in grid], "right": [row[::-1] for row in grid]}[side]


class Skyscraper(LogicTask):
    name = "skyscraper"

    def build(self, rng, level):
        n, share = LEVELS[level]
        square = random_latin_square(rng, n)
        clues = {side: [visible(line) if rng.random() < share else 0 for line in lines_from(square, side)]
                 for side in SIDES}
        shown = "\n".join(f"{side}: {' '.join(str(v) if v else '.' for v in clues[side])}" for side in SIDES)
        question = (f"Place towers of heights 1-{n} in a {n}x{n} grid, each height once per row and column. "
                    "A clue is how many towers are visible from that side (taller towers hide shorter ones "
                    "behind them); top and bottom clues go left to right, left and right clues top to "
                    f"bottom; '.' means no clue.\n{shown}\n\n"
                    f"Answer with the full grid: {n} lines of {n} digits separated by spaces.")
        return question, format_grid(square), {"size": n, **clues}

    def check(self, meta, answer):
        grid = parse_int_grid(answer, meta["size"])
        problem = latin_violation(grid)
        if problem:
            return problem
        for side in SIDES:
            for i, (clue, line) in enumerate(zip(meta[side], lines_from(grid, side))):
                if clue and visible(line) != clue:
                    return f"{side} clue {i + 1} wants {clue} visible, sees {visible(line)}"
        return None
