"""Write tests/fixtures/golds/: real third-party rows whose golds the reward had to stop being gamed on.

    pip download evals==3.0.1.post1 --no-deps -d /tmp/evals     # OpenAI's evals wheel (MIT)
    PYTHONPATH=. python scripts/make_gold_fixtures.py /tmp/evals/evals-3.0.1.post1-py3-none-any.whl

evals.jsonl: rows of the wheel's registry data, each as it is in the wheel ("sample": input, ideal)
with the set and line it came from. rg.jsonl: reasoning-gym question/answer exports (the installed
reasoning-gym, Apache-2.0), each {"question", "answer", "task", "seed", "index"}. MMLU rows are not in
the wheel (its mmlu.yaml names the hub dataset): tests/fixtures/golds/mmlu.jsonl holds two rows of
cais/mmlu (MIT) written by hand in the evals MultipleChoice prompt form. LICENSES.md says whose is what.
"""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "golds"
EVALS_ROWS = {  # set -> (file in evals/registry/data/<set>/, line numbers counted from 0)
    "math-derivatives": ("questions.jsonl", [0, 1, 2, 5, 6, 10, 21]),
    "chinese-remainder-theorem": ("samples.jsonl", [0, 2]),
    "aime_evaluation": ("samples.jsonl", [0, 1]),
    "determinant": ("samples.jsonl", [100, 200]),
    "probabilities-word-problems": ("samples.jsonl", [0]),
    "probability_questions": ("probability_questions.jsonl", [0]),
    "logiqa": ("logiqa.jsonl", [0, 1]),
    "medmcqa": ("samples.jsonl", [0, 1]),
    "jee-math": ("samples.jsonl", [0]),
}
RG_ROWS = {"prime_factorization": [1, 2], "fraction_simplification": [0, 1], "caesar_cipher": [0],
           "letter_jumble": [1], "word_sorting": [0], "basic_arithmetic": [0]}


def evals_rows(wheel: Path) -> list[dict]:
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for name, (file, lines) in EVALS_ROWS.items():
            text = zf.read(f"evals/registry/data/{name}/{file}").decode("utf-8").splitlines()
            out += [{"set": name, "line": i, "sample": json.loads(text[i])} for i in lines]
    return out


def rg_rows(seed: int = 1) -> list[dict]:
    import reasoning_gym

    out = []
    for task, indices in RG_ROWS.items():
        data = reasoning_gym.create_dataset(task, seed=seed, size=max(indices) + 1)
        for i in indices:
            item = data[i]
            out.append({"question": item["question"], "answer": item["answer"], "task": task, "seed": seed,
                        "index": i})
    return out


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{path}: {len(rows)} rows")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    write(OUT / "evals.jsonl", evals_rows(Path(sys.argv[1])))
    write(OUT / "rg.jsonl", rg_rows())
