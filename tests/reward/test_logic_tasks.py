"""Every logic task (generators and checks in m1flow.tasks.logic, scored by svc_reward): its generator's solution verifies, broken answers are rejected, malformed
answers are format errors, puzzles survive JSON, and other valid solutions (found by brute force
here, independently of the verifiers) are accepted too."""
from __future__ import annotations

import json
import re
from fractions import Fraction
from itertools import permutations, product

import pytest

from m1flow.tasks.logic import TASKS, Puzzle
from m1flow.tasks.logic.zebra import count_solutions
from svc_reward.result import Status
from svc_reward.verifiers.logic import verify_puzzle

LEVELS = (1, 2, 3)
SEEDS = (0, 1, 2)


def wrap(answer: str) -> str:
    return f"<think>let me work it out</think>\nSo:\n<answer>{answer}</answer>"


def _grid_bump(solution: str):
    """Change the first cell of a digit grid to another digit (breaks its row)."""
    rows = [r.split() for r in solution.splitlines()]
    n = len(rows)
    rows[0][0] = str(int(rows[0][0]) % n + 1)
    return "\n".join(" ".join(r) for r in rows)


def _flip_first_cell(solution: str, on: str, off: str) -> str:
    first = solution[0]
    return (off if first == on else on) + solution[1:]


def _move_first_star(solution: str) -> str:
    lines = solution.splitlines()
    col = lines[0].index("*")
    new = (col + 1) % len(lines[0])
    lines[0] = "".join("*" if i == new else "." for i in range(len(lines[0])))
    return "\n".join(lines)


def _game24_wrong(p: Puzzle) -> str:
    nums = p.metadata["numbers"]
    total = sum(nums)
    if total != p.metadata["target"]:
        return " + ".join(map(str, nums))
    return " * ".join(map(str, nums))


def _crypt_duplicate(p: Puzzle) -> str:
    pairs = [pair.split("=") for pair in p.solution.split(", ")]
    pairs[1][1] = pairs[0][1]
    return ", ".join("=".join(pair) for pair in pairs)


def _zebra_swap(p: Puzzle) -> str:
    lines = [line.split(": ")[1].split(", ") for line in p.solution.splitlines()]
    lines[0][0], lines[1][0] = lines[1][0], lines[0][0]
    return "\n".join(f"House {i + 1}: {', '.join(v)}" for i, v in enumerate(lines))


def _swap_first_words(p: Puzzle) -> str:
    words = p.solution.split(", ")
    words[0], words[1] = words[1], words[0]
    return ", ".join(words)


def _flip_yes_no(p: Puzzle) -> str:
    words = p.solution.split(", ")
    words[0] = "no" if words[0] == "yes" else "yes"
    return ", ".join(words)


MUTATE = {
    "sudoku": lambda p: _grid_bump(p.solution),
    "futoshiki": lambda p: _grid_bump(p.solution),
    "skyscraper": lambda p: _grid_bump(p.solution),
    "kakurasu": lambda p: _flip_first_cell(p.solution, "#", "."),
    "star_battle": lambda p: _move_first_star(p.solution),
    "game24": _game24_wrong,
    "cryptarithm": _crypt_duplicate,
    "dyck": lambda p: p.solution + " )",
    "zebra": _zebra_swap,
    "word_sorting": _swap_first_words,
    "boolean_expressions": lambda p: "False" if p.solution == "True" else "True",
    "web_of_lies": _flip_yes_no,
}

JUNK = ["", "hello, world ???", "∑∫ ≠ ∞", "<b>x</b>", "\n\n", "A" * 5000 + "?", "(" * 5000 + "1" + ")" * 5000,
        "not " * 3000 + "(True)", "x" * 30_000]


def test_registry_has_at_least_twelve_tasks():
    assert len(TASKS) >= 12 and set(MUTATE) <= set(TASKS)
    assert all(name == task.name for name, task in TASKS.items())


@pytest.mark.parametrize("name", sorted(TASKS))
def test_generator_solution_verifies_and_mutation_fails(name):
    task = TASKS[name]
    for level in LEVELS:
        for seed in SEEDS:
            puzzle = task.generate(seed, level)
            assert puzzle == task.generate(seed, level), "generation must be deterministic"
            assert puzzle.solution and "<answer>" in puzzle.question
            carried = json.loads(json.dumps(puzzle.to_dict()))
            assert Puzzle.from_dict(carried) == puzzle
            good = verify_puzzle(carried, wrap(puzzle.solution))
            assert good.status is Status.OK and good.correct is True and good.reward == 1.0, (level, seed, good)
            bad = verify_puzzle(puzzle, wrap(MUTATE[name](puzzle)))
            assert bad.status is Status.OK and bad.correct is False and bad.reward == 0.0, (level, seed, bad)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_difficulty_knob_changes_the_puzzle(name):
    easy, hard = TASKS[name].generate(5, 1), TASKS[name].generate(5, 3)
    assert len(json.dumps(hard.metadata)) >= len(json.dumps(easy.metadata))
    assert easy.question != hard.question


@pytest.mark.parametrize("name", sorted(TASKS))
def test_malformed_answers_are_format_errors(name):
    task = TASKS[name]
    puzzle = task.generate(3, 2)
    assert verify_puzzle(puzzle, puzzle.solution).status is Status.FORMAT_ERROR  # no <answer> tag
    assert verify_puzzle(puzzle, f"<think><answer>{puzzle.solution}</answer></think>").status is Status.FORMAT_ERROR
    for junk in JUNK:
        result = verify_puzzle(puzzle, wrap(junk))
        assert result.status is Status.FORMAT_ERROR, (junk[:20], result)
        assert result.reward == 0.0 and result.usable


def test_last_answer_tag_wins():
    task = TASKS["boolean_expressions"]
    puzzle = task.generate(0, 1)
    wrong = "False" if puzzle.solution == "True" else "True"
    assert verify_puzzle(puzzle, f"<answer>{wrong}</answer> no wait <answer>{puzzle.solution}</answer>").correct
    assert not verify_puzzle(puzzle, f"<answer>{puzzle.solution}</answer> no wait <answer>{wrong}</answer>").correct


# ---------------------------------------------------------------- other valid solutions

def latin_squares_4():
    rows = list(permutations(range(1, 5)))
    for a in rows:
        for b in rows:
            if any(x == y for x, y in zip(a, b)):
                continue
            for c in rows:
                if any(x in (y, z) for x, y, z in zip(c, a, b)):
                    continue
                d = tuple(10 - x - y - z for x, y, z in zip(a, b, c))
                yield [list(a), list(b), list(c), list(d)]


def as_text(grid):
    return "\n".join(" ".join(map(str, row)) for row in grid)


def seen(line):
    count, top = 0, 0
    for h in line:
        if h > top:
            count, top = count + 1, h
    return count


def sudoku_ok(meta, g):
    keeps = all(v == 0 or g[r][c] == v for r, row in enumerate(meta["givens"]) for c, v in enumerate(row))
    boxes = all(len({g[r][c] for r in (R, R + 1) for c in (C, C + 1)}) == 4 for R in (0, 2) for C in (0, 2))
    return keeps and boxes


def futoshiki_ok(meta, g):
    keeps = all(v == 0 or g[r][c] == v for r, row in enumerate(meta["givens"]) for c, v in enumerate(row))
    return keeps and all(g[a][b] < g[c][d] for a, b, c, d in meta["less"])


def skyscraper_ok(meta, g):
    cols = [[g[r][c] for r in range(4)] for c in range(4)]
    views = {"top": cols, "bottom": [c[::-1] for c in cols], "left": g, "right": [r[::-1] for r in g]}
    return all(clue == 0 or seen(line) == clue
               for side, lines in views.items() for clue, line in zip(meta[side], lines))


@pytest.mark.parametrize("name,oracle", [("sudoku", sudoku_ok), ("futoshiki", futoshiki_ok),
                                         ("skyscraper", skyscraper_ok)])
def test_latin_grid_verifier_agrees_with_brute_force(name, oracle):
    """All 576 latin squares of order 4: accepted exactly when the independent oracle says so."""
    squares = list(latin_squares_4())
    assert len(squares) == 576
    puzzles = [TASKS[name].generate(seed, 1) for seed in range(4)]
    sparse = dict(puzzles[0].metadata)  # fewer clues than generated, so several solutions surely exist
    if "givens" in sparse:
        sparse["givens"] = [sparse["givens"][0]] + [[0] * 4] * 3
    if "less" in sparse:
        sparse["less"] = sparse["less"][:1]
    for side in ("bottom", "left", "right"):
        if side in sparse:
            sparse[side] = [0] * 4
    puzzles.append(Puzzle.from_dict(dict(puzzles[0].to_dict(), metadata=sparse)))
    multi = 0
    for puzzle in puzzles:
        accepted = [g for g in squares if verify_puzzle(puzzle, wrap(as_text(g))).correct]
        assert accepted == [g for g in squares if oracle(puzzle.metadata, g)]
        assert accepted, "every puzzle has a solution"
        multi += len(accepted) > 1
    assert multi >= 1, "expected at least one puzzle with several solutions"


def test_kakurasu_accepts_every_brute_force_solution():
    multi = 0
    for seed in range(30):  # 4x4 kakurasu is usually unique; seed 22 is not
        puzzle = TASKS["kakurasu"].generate(seed, 1)
        meta = puzzle.metadata
        row_options = [[bits for bits in product((0, 1), repeat=4)
                        if sum((c + 1) * b for c, b in enumerate(bits)) == meta["rows"][r]] for r in range(4)]
        found = [rows for rows in product(*row_options)
                 if [sum((r + 1) * rows[r][c] for r in range(4)) for c in range(4)] == meta["cols"]]
        for rows in found:
            text = "\n".join("".join("#" if b else "." for b in row) for row in rows)
            assert verify_puzzle(puzzle, wrap(text)).correct, text
        multi += len(found) > 1
    assert multi >= 1


def test_star_battle_accepts_every_brute_force_solution():
    multi = 0
    for seed in range(8):
        puzzle = TASKS["star_battle"].generate(seed, 1)
        regions = puzzle.metadata["regions"]
        found = [cols for cols in permutations(range(5))
                 if all(abs(cols[i] - cols[i + 1]) > 1 for i in range(4))
                 and len({regions[r][cols[r]] for r in range(5)}) == 5]
        assert found
        for cols in found:
            text = "\n".join("".join("*" if c == cols[r] else "." for c in range(5)) for r in range(5))
            assert verify_puzzle(puzzle, wrap(text)).correct, text
        multi += len(found) > 1
    assert multi >= 1


def _left_nested_expressions(numbers):
    """((a o b) o c) o d over all orders and operators, with exact values (no eval)."""
    ops = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
           "/": lambda x, y: x / y if y else None}
    for order in set(permutations(numbers)):
        for chosen in product(ops, repeat=len(order) - 1):
            value, text = Fraction(order[0]), str(order[0])
            for op, n in zip(chosen, order[1:]):
                value = None if value is None else ops[op](value, Fraction(n))
                text = f"({text} {op} {n})"
            if value is not None:
                yield text, value


def test_game24_accepts_other_solutions_and_checks_target():
    task = TASKS["game24"]
    other_found = 0
    for seed in range(6):
        puzzle = task.generate(seed, 1)
        for text, value in _left_nested_expressions(puzzle.metadata["numbers"]):
            result = verify_puzzle(puzzle, wrap(text))
            assert result.correct is (value == 24), (text, value)
            other_found += value == 24 and text != puzzle.solution
    assert other_found >= 1


def test_game24_parser_rules():
    puzzle = Puzzle("game24", 0, 1, "q", "", {"numbers": [3, 3, 8, 8], "target": 24})
    task = TASKS["game24"]
    verdict = lambda answer: verify_puzzle(puzzle, wrap(answer))  # noqa: E731
    assert verdict("8 / (3 - 8 / 3)").correct  # exact fractions: 8/3 is not rounded
    assert verdict("8 ÷ (3 − 8 ÷ 3)".replace("−", "-")).correct
    assert verdict("8/(3-8/3) = 24").correct
    assert not verdict("8/(3-8/3) = 25").correct
    assert not verdict("8 * 3 + 8 - 3").correct  # uses every number once but makes 27
    assert not verdict("8 * 3").correct  # right value, numbers missing
    assert not verdict("8 / (3 - 3) + 8").correct  # division by zero is wrong, not a crash
    for malformed in ("-8 + 3 * 8 + 3", "8 ** 3 3 8", "(8 + 3", "8 + 3)", "eval('24')", "8x3+3-8", "3 3 8 8"):
        assert verdict(malformed).status is Status.FORMAT_ERROR, malformed


def test_cryptarithm_accepts_any_valid_assignment():
    puzzle = Puzzle("cryptarithm", 0, 1, "q", "", {"words": ["AB", "C", "DE"]})
    task = TASKS["cryptarithm"]
    assert verify_puzzle(puzzle, wrap("A=1, B=2, C=3, D=4, E=5")).correct is False  # 12 + 3 != 45
    assert verify_puzzle(puzzle, wrap("A=1, B=5, C=8, D=2, E=3")).correct is True  # 15 + 8 = 23
    assert verify_puzzle(puzzle, wrap("A=4, B=7, C=6, D=5, E=3")).correct is True  # 47 + 6 = 53
    assert verify_puzzle(puzzle, wrap("A=1, B=5, C=8, D=2, E=8")).correct is False  # C and E share 8
    assert verify_puzzle(puzzle, wrap("A=0, B=5, C=8, D=1, E=3")).correct is False  # leading zero
    assert verify_puzzle(puzzle, wrap("A=1, B=5, C=8, D=2")).status is Status.FORMAT_ERROR
    assert verify_puzzle(puzzle, wrap("A=1, B=5, C=8, D=2, E=3, Z=4")).status is Status.FORMAT_ERROR


def test_zebra_generator_makes_unique_puzzles():
    for level in LEVELS:
        meta = TASKS["zebra"].generate(11, level).metadata
        assert count_solutions(meta["attributes"], meta["houses"], meta["clues"]) == 1


def test_dyck_accepts_the_whole_sequence_and_rejects_openers():
    task = TASKS["dyck"]
    puzzle = task.generate(4, 2)
    whole = " ".join(puzzle.metadata["prefix"]) + " " + puzzle.solution
    assert verify_puzzle(puzzle, wrap(whole)).correct
    assert verify_puzzle(puzzle, wrap(puzzle.solution.replace(" ", ""))).correct
    assert not verify_puzzle(puzzle, wrap("( ) " + puzzle.solution)).correct


def test_boolean_parser_precedence():
    task = TASKS["boolean_expressions"]
    cases = {"True or False and False": "True", "not True or True": "True", "not (True or True)": "False",
             "(True and not False) and (False or not not True)": "True", "not not not False": "True",
             "False or False or (True and False)": "False"}
    for expression, value in cases.items():
        puzzle = Puzzle("boolean_expressions", 0, 1, "q", value, {"expression": expression})
        assert verify_puzzle(puzzle, wrap(value)).correct, expression
        assert not verify_puzzle(puzzle, wrap("False" if value == "True" else "True")).correct, expression


def test_web_of_lies_is_derived_from_statements():
    puzzle = TASKS["web_of_lies"].generate(2, 3)
    meta = puzzle.metadata
    assert re.fullmatch(r"(yes|no)(, (yes|no))*", puzzle.solution)
    flipped = dict(meta, first_truthful=not meta["first_truthful"])  # negating the fact flips everyone
    negated = ", ".join("no" if w == "yes" else "yes" for w in puzzle.solution.split(", "))
    assert verify_puzzle(Puzzle.from_dict(dict(puzzle.to_dict(), metadata=flipped)),
                                       wrap(negated)).correct


@pytest.mark.parametrize("name", sorted(TASKS))
def test_fuzzed_answers_never_crash_the_verifier(name):
    """Random edits of the solution and random strings: a verdict or a format error, never a judge error."""
    import random
    rng = random.Random(name)
    alphabet = "0123456789 ,.=:+-*/()[]{}<>#*\nHouseyesnoTrueFalseABCx"
    task = TASKS[name]
    puzzle = task.generate(7, 2)
    for _ in range(150):
        chars = list(puzzle.solution)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(chars) + 1)
            op = rng.random()
            if op < 0.4 and i < len(chars):
                chars[i] = rng.choice(alphabet)
            elif op < 0.7:
                chars.insert(i, rng.choice(alphabet))
            elif i < len(chars):
                del chars[i]
        for answer in ("".join(chars), "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))):
            result = verify_puzzle(puzzle, wrap(answer))
            assert result.status in (Status.OK, Status.FORMAT_ERROR), (answer, result)
