"""Write the small task-data fixtures of tests/fixtures/data/ (all generated here; license MIT, ours).

    PYTHONPATH=. python scripts/make_fixtures.py [--out tests/fixtures/data]

Deterministic: the same files every run, so the committed ones can be checked against a rerun.
Good files (every row's gold scores 1.0): a verl parquet of generated gsm8k-style word problems,
a JSONL in m1flow form mixing kinds, a CSV in m1flow form. Bad files, one problem each (the tests
assert which row and field is named): a malformed JSON line, a missing gold, an unknown kind, a
reasoning-gym task that does not exist, golds that do not score, a truncated parquet.
"""
from __future__ import annotations

import argparse
import csv
import json
import random
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "data"
LICENSE = "MIT"
GSM8K_NOTE = 'Let\'s think step by step and output the final answer after "####".'

TEMPLATES = [
    ("{name} has {a} apples. {pron} buys {b} bags with {c} apples in each bag. How many apples does {name} "
     "have now?", lambda a, b, c: a + b * c,
     "{name} buys {b} * {c} = {bc} apples. {a} + {bc} = {ans}."),
    ("A shelf holds {a} books. {name} takes away {b} books, then puts back {c} boxes of 2 books each. How many "
     "books are on the shelf?", lambda a, b, c: a - b + 2 * c,
     "{a} - {b} = {ab}. {name} puts back {c} * 2 = {c2} books. {ab} + {c2} = {ans}."),
    ("{name} runs {a} km every day for {b} days and then {c} km more. How many km did {pron_l} run in all?",
     lambda a, b, c: a * b + c, "{a} * {b} = {ab2} km, plus {c} km is {ans} km."),
]
NAMES = [("Ana", "She"), ("Ben", "He"), ("Chen", "He"), ("Dara", "She"), ("Eli", "He"), ("Fatima", "She")]


def word_problem(rng: random.Random) -> tuple[str, str, int]:
    template, answer, working = rng.choice(TEMPLATES)
    name, pron = rng.choice(NAMES)
    a, b, c = rng.randint(20, 90), rng.randint(2, 9), rng.randint(2, 12)
    ans = answer(a, b, c)
    fields = dict(name=name, pron=pron, pron_l=pron.lower(), a=a, b=b, c=c, bc=b * c, ab=a - b, c2=2 * c,
                  ab2=a * b, ans=ans)
    return template.format(**fields), working.format(**fields) + f"\n#### {ans}", ans


def verl_rows(n: int, seed: int = 19) -> list[dict[str, Any]]:
    """Rows as verl's examples/data_preprocess/gsm8k.py writes them."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        question, solution, ans = word_problem(rng)
        rows.append({"data_source": "openai/gsm8k",
                     "prompt": [{"role": "user", "content": f"{question} {GSM8K_NOTE}"}],
                     "ability": "math",
                     "reward_model": {"style": "rule", "ground_truth": str(ans)},
                     "extra_info": {"split": "train", "index": i, "answer": solution, "question": question}})
    return rows


def puzzle(family: str, seed: int, difficulty: int = 1) -> dict[str, Any]:
    try:
        from m1flow.tasks.logic import TASKS  # type: ignore[attr-defined]
    except ImportError:
        from svc_reward.verifiers.logic import TASKS
    return TASKS[family].generate(seed=seed, difficulty=difficulty).to_dict()


SUM_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
SUM_TESTS = [{"stdin": "2 3\n", "expected_stdout": "5\n"}, {"stdin": "10 -4\n", "expected_stdout": "6\n"}]


def record(id_: str, prompt: Any, kind: str, gold: str = "", spec: dict | None = None, **extra: Any) -> dict:
    return {"id": id_, "source": "mixed", "prompt": prompt,
            "verifier": {"kind": kind, "gold": gold, "spec": spec or {}}, "license": LICENSE, **extra}


def mixed_rows() -> list[dict[str, Any]]:
    sudoku, game24 = puzzle("sudoku", 3), puzzle("game24", 5)
    return [
        record("arith-0", "47+38=", "arith", "85", difficulty=1.0),
        record("math-0", "What is $\\frac{1}{2} + \\frac{1}{4}$? Put the answer in \\boxed{}.", "math", "\\frac{3}{4}"),
        record("math-1", [{"role": "system", "content": "You are a careful mathematician."},
                          {"role": "user", "content": "Solve $2x + 3 = 11$ for $x$. Answer: <x>"}],
               "math", "4", {"style": "math_dapo"}),
        record("logic-0", sudoku["question"], "logic:sudoku", spec=sudoku),
        record("logic-1", game24["question"], "logic:game24", spec=game24),
        record("code-0", "Read two integers a and b from one line and print a + b.", "code", SUM_PROGRAM,
               {"language": "python", "tests": SUM_TESTS}),
        {**record("chat-0", "Write a haiku about streams.", "genrm"), "domain": "general"},
    ]


def csv_rows() -> list[dict[str, str]]:
    rows = []
    for rec in [record("arith-1", "12+30=", "arith", "42"), record("math-2", "What is 7 * 6?", "math", "42"),
                record("code-1", "Print a + b for two integers on one line.", "code", SUM_PROGRAM,
                       {"tests": SUM_TESTS})]:
        rows.append({"id": rec["id"], "source": "csv", "prompt": rec["prompt"],
                     "verifier.kind": rec["verifier"]["kind"], "verifier.gold": rec["verifier"]["gold"],
                     "verifier.spec": json.dumps(rec["verifier"]["spec"]) if rec["verifier"]["spec"] else "",
                     "difficulty": "", "license": LICENSE})
    return rows


def bad_files() -> dict[str, list[str]]:
    """name -> lines; the docstring of each test says which row is bad and why."""
    good = json.dumps(record("ok-0", "1+1=", "arith", "2"))
    other = json.dumps(record("ok-1", "3+3=", "arith", "6"))  # ids are unique in a file (validate refuses repeats)
    wrong_puzzle = puzzle("sudoku", 4)
    wrong_puzzle["solution"] = wrong_puzzle["solution"].replace("1", "#", 1).replace("2", "1", 1).replace("#", "2")
    return {
        "bad_json.jsonl": [good, '{"id": "broken", "prompt": "2+2=", "verifier": {"kind": "arith"', other],
        "missing_gold.jsonl": [good, json.dumps(record("no-gold", "What is 6 * 7?", "math"))],
        "unknown_kind.jsonl": [json.dumps(record("odd", "Spell it.", "spelling", "cat")), good],
        "bad_rg_task.jsonl": [json.dumps(record("rg-0", "Count the legs.", "rg:leg_countin",
                                                spec={"task": "leg_countin", "seed": 1, "index": 0}))],
        "wrong_gold.jsonl": [good,
                             json.dumps(record("math-cut", "What is 1/2 + 1/4?", "math", "}")),  # gold cut short
                             json.dumps(record("code-wrong", "Print a + b.", "code",
                                               SUM_PROGRAM.replace("a + b", "a - b"), {"tests": SUM_TESTS})),
                             json.dumps(record("logic-wrong", wrong_puzzle["question"], "logic:sudoku",
                                               spec=wrong_puzzle))],
    }


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(out / "gsm8k_verl.parquet", verl_rows(24))
    raw = (out / "gsm8k_verl.parquet").read_bytes()
    (out / "truncated.parquet").write_bytes(raw[: len(raw) * 2 // 3])
    (out / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mixed_rows()))
    with open(out / "tasks.csv", "w", newline="") as f:
        rows = csv_rows()
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for name, lines in bad_files().items():
        (out / name).write_text("".join(line + "\n" for line in lines))
    print(f"wrote {len(list(out.iterdir()))} files to {out}")


if __name__ == "__main__":
    main()
