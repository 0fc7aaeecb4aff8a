"""Star battle: one star in each row, column and region; no two stars touch, not even diagonally.

The generator places the stars first, then grows one region around each star, so a solution exists.
"""
from __future__ import annotations

import random

from m1flow.tasks.logic.base import LogicTask
from m1flow.tasks.logic.grids import neighbours8, parse_mark_grid

LEVELS = {1: 5, 2: 6, 3: 8}
LETTERS = "ABCDEFGHIJ"


def place_stars(rng: random.Random, n: int) -> list[int]:
    """Star column per row, adjacent rows at least two columns apart (randomised backtracking)."""
    def extend(cols: list[int]) -> list[int] | None:
        if len(cols) == n:
            return cols
        for c in rng.sample(range(n), n):
            if c not in cols and (not cols or abs(c - cols[-1]) > 1):
                found = extend(cols + [c])
                if found:
                    return found
        return None
    return extend([])


def grow_regions(rng: random.Random, stars: list[int]) -> list[list[int]]:
    """Region id per cell: each star seeds a region; regions grow into random free neighbours."""
    n = len(stars)
    region = [[-1] * n for _ in range(n)]
    frontier = []
    for r, c in enumerate(stars):
        region[r][c] = r
        frontier.append((r, c))
    while frontier:
        r, c = frontier[rng.randrange(len(frontier))]
        free = [(a, b) for a, b in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
                if 0 <= a < n and 0 <= b < n and region[a][b] < 0]
        if not free:
            frontier.remove((r, c))
            continue
        a, b = rng.choice(free)
        region[a][b] = region[r][c]
        frontier.append((a, b))
    return region


class StarBattle(LogicTask):
    name = "star_battle"

    def build(self, rng, level):
        n = LEVELS[level]
        stars = place_stars(rng, n)
        region = grow_regions(rng, stars)
        regions = ["".join(LETTERS[v] for v in row) for row in region]
        question = (f"Place {n} stars in this {n}x{n} grid of regions (one letter per region) so that every "
                    "row, every column and every region has exactly one star, and no two stars touch, "
                    "not even diagonally.\n" + "\n".join(regions) + "\n\n"
                    f"Answer with {n} lines of {n} characters: * for a star, . for empty.")
        solution = "\n".join("".join("*" if c == stars[r] else "." for c in range(n)) for r in range(n))
        return question, solution, {"size": n, "regions": regions}

    def check(self, meta, answer):
        n, regions = meta["size"], meta["regions"]
        grid = parse_mark_grid(answer, n, "*", ".")
        stars = [(r, c) for r in range(n) for c in range(n) if grid[r][c]]
        for label, key in (("row", lambda s: s[0]), ("column", lambda s: s[1]),
                           ("region", lambda s: regions[s[0]][s[1]])):
            counts: dict[object, int] = {}
            for star in stars:
                counts[key(star)] = counts.get(key(star), 0) + 1
            if len(counts) != n or any(v != 1 for v in counts.values()):
                return f"not exactly one star in every {label}"
        for r, c in stars:
            if any(grid[a][b] for a, b in neighbours8(r, c, n)):
                return f"the star at ({r + 1},{c + 1}) touches another"
        return None
