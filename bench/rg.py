"""reasoning-gym scoring through the `rg:<task>` kind against calling the library directly.

Why: the rg kind regenerates each item from (task, config, seed, index) instead of carrying it, so
the reward side pays one generation per sample on top of the library's score_answer; this shows
what the regeneration, our answer extraction, the JSON spec and the cache cost against a trainer
that calls reasoning-gym itself (dataset[i] then score_answer(gold, entry)). The third rate is the
whole trip a sample takes: rg_record at the source, the framed Prompt, then the rg kind.

    PYTHONPATH=. python bench/rg.py [--items 200] [--family NAME ...]
"""
from __future__ import annotations

import argparse
import time

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.data.generators import rg_record
from m1flow.tasks import rg
from svc_reward.verifiers.rg import score_rg

FAMILIES = ["leg_counting", "basic_arithmetic", "spell_backward", "propositional_logic", "graph_color",
            "maze", "knights_knaves", "mini_sudoku", "zebra_puzzles"]
SLOW = {"zebra_puzzles": 10}  # items per run where one item takes ~0.2 s


def direct_rate(task: str, n: int) -> tuple[float, int]:
    """(items per second, items whose reference scored 1.0) for reasoning-gym alone: generate item i
    and score its reference answer."""
    from reasoning_gym.factory import create_dataset

    data = create_dataset(task, seed=11)
    full = 0
    start = time.perf_counter()
    for i in range(n):
        item = data[i]
        full += data.score_answer(rg.reference_answer(item), item) == 1.0
    return n / (time.perf_counter() - start), full


def kind_rates(task: str, n: int) -> tuple[float, float, int]:
    """(reward side only, source + wire + reward side) items per second through the rg kind, and
    the items whose reference scored 1.0."""
    start = time.perf_counter()
    prompts = [codec.decode(codec.encode(rg_record(task, seed=11, index=i).to_prompt(2)), events.Prompt)
               for i in range(n)]
    made = time.perf_counter() - start
    responses = [f"<think>...</think>\n<answer>{p.verifier.gold}</answer>" for p in prompts]
    full = 0
    start = time.perf_counter()
    for prompt, response in zip(prompts, responses):
        full += score_rg(response, prompt.verifier).reward == 1.0
    scored = time.perf_counter() - start
    return n / scored, n / (made + scored), full


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--family", action="append")
    args = parser.parse_args(argv)
    rg.task_names()  # import reasoning-gym before timing
    print(f"{'family':22s} {'items':>5s} {'direct/s':>10s} {'rg kind/s':>10s} {'ratio':>6s} {'end-to-end/s':>13s}"
          f" {'gold=1 direct/kind':>19s}")
    for task in args.family or FAMILIES:
        n = min(args.items, SLOW.get(task, args.items))
        kind_rates(task, 2)  # warm the dataset cache, as a running reward replica has it
        direct, full_direct = direct_rate(task, n)
        reward_side, whole, full_kind = kind_rates(task, n)
        print(f"{task:22s} {n:5d} {direct:10.0f} {reward_side:10.0f} {reward_side / direct:6.2f} {whole:13.0f}"
              f" {f'{full_direct}/{full_kind}':>19s}", flush=True)


if __name__ == "__main__":
    main()
