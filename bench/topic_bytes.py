"""Bytes per message on each topic at the report's output lengths, as m1flow frames them (protobuf
in the checked frame) beside the same content as JSON (what a JSON-over-Kafka design would carry),
and what that makes per second for a given rollout rate. The capacity plan in docs/deploy.md is
computed from this table.

Why measured, not estimated: a Rollout carries every sampled token id (a varint: 3 bytes for a
200K vocabulary) and its log-prob (4 bytes), plus the response text; a ScoredGroup carries the
group's samples again, so the `scored` record of one group at an 80K window approaches the 16 MiB
record limit the broker and producers are configured with (ops/kafka/broker.py). Token ids are
drawn uniformly from the vocabulary and the text at 4 characters per token, the regime of real
responses (ids spread over the vocabulary, English-like text).

Run: PYTHONPATH=. python bench/topic_bytes.py [--vocab 200064] [--group 16] [--rollouts-per-s 100]
"""
from __future__ import annotations

import argparse
import json
import random

from google.protobuf.json_format import MessageToJson

from m1flow.bus import codec
from m1flow.bus.limits import MESSAGE_MAX_BYTES
from m1flow.contracts import events

RECORD_LIMIT = MESSAGE_MAX_BYTES  # message.max.bytes of the broker and the producers


def rollout(tokens: int, prompt_tokens: int, vocab: int, rng: random.Random) -> events.Rollout:
    return events.Rollout(
        header=codec.header("rollout-0", run_id="plan", group_id="g", rollout_id="g/0"),
        rollout_id="g/0", group_id="g", prompt_id="p", index=0, group_size=16, task_type="math",
        prompt_text="x" * (4 * prompt_tokens), prompt_token_ids=[rng.randrange(vocab) for _ in range(prompt_tokens)],
        token_ids=[rng.randrange(vocab) for _ in range(tokens)],
        logprobs=[-rng.expovariate(2.0) for _ in range(tokens)], response_text="y" * (4 * tokens),
        finish_reason=events.FINISH_REASON_STOP, policy_version=12, max_new_tokens=tokens, engine="vllm",
        temperature=1.0, top_p=0.95, source="math", domain="reasoning",
        verifier=events.VerifierSpec(kind="math", gold="42"))


def scored(sample: events.Rollout, group: int) -> events.ScoredGroup:
    return events.ScoredGroup(
        header=codec.header("reward-0", run_id="plan", group_id="g"), group_id="g", prompt_id="p",
        task_type="math", group_size=group, verifier_kind="math", source="math", domain="reasoning",
        source_offsets=[f"rollouts/3@{i}" for i in range(group)],
        samples=[events.ScoredSample(rollout_id=f"g/{i}", index=i, reward=1.0, correct=True, policy_version=12,
                                     prompt_token_ids=sample.prompt_token_ids, token_ids=sample.token_ids,
                                     logprobs=sample.logprobs, finish_reason=sample.finish_reason,
                                     max_new_tokens=sample.max_new_tokens, temperature=1.0, top_p=0.95)
                 for i in range(group)])


def prompt(prompt_tokens: int) -> events.Prompt:
    return events.Prompt(header=codec.header("source-0", run_id="plan"), prompt_id="p", task_type="math",
                         text="x" * (4 * prompt_tokens), source="math", domain="reasoning",
                         verifier=events.VerifierSpec(kind="math", gold="42"))


def sizes(message) -> tuple[int, int]:  # noqa: ANN001 - any protobuf message
    return len(codec.encode(message)), len(MessageToJson(message, indent=None).encode())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=200_064, help="MiniMax-M1's vocabulary")
    p.add_argument("--group", type=int, default=16, help="samples per prompt")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--windows", type=int, nargs="*", default=[1024, 8192, 40_960, 81_920])
    p.add_argument("--rollouts-per-s", type=float, default=100.0, help="the fleet's completed responses per second")
    p.add_argument("--json", action="store_true", help="print the table as JSON rows")
    args = p.parse_args()
    rng = random.Random(0)
    rows = []
    p_pb, p_js = sizes(prompt(args.prompt_tokens))
    for window in args.windows:
        sample = rollout(window, args.prompt_tokens, args.vocab, rng)
        r_pb, r_js = sizes(sample)
        s_pb, s_js = sizes(scored(sample, args.group))
        rate = args.rollouts_per_s
        rows.append({"tokens": window, "prompt_B": p_pb, "rollout_B": r_pb, "rollout_json_B": r_js,
                     "scored_B": s_pb, "scored_json_B": s_js, "scored_of_limit": s_pb / RECORD_LIMIT,
                     "rollouts_MB_s": r_pb * rate / 1e6, "scored_MB_s": s_pb * rate / args.group / 1e6,
                     "prompts_MB_s": p_pb * rate / args.group / 1e6})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'tokens':>8}{'rollout B':>12}{'as JSON':>12}{'ratio':>7}{'scored B':>12}{'as JSON':>12}{'ratio':>7}"
          f"{'of 16MiB':>9}{'rollouts MB/s':>15}{'scored MB/s':>13}")
    for r in rows:
        print(f"{r['tokens']:>8}{r['rollout_B']:>12}{r['rollout_json_B']:>12}{r['rollout_json_B'] / r['rollout_B']:>7.2f}"
              f"{r['scored_B']:>12}{r['scored_json_B']:>12}{r['scored_json_B'] / r['scored_B']:>7.2f}"
              f"{r['scored_of_limit']:>9.2f}{r['rollouts_MB_s']:>15.2f}{r['scored_MB_s']:>13.2f}")
    print(f"regime: vocabulary {args.vocab} (token ids as varints), prompt {args.prompt_tokens} tokens, group "
          f"{args.group}, {args.rollouts_per_s:g} responses/s; prompt record {p_pb} B (JSON {p_js} B); each "
          f"response is window-long (the upper bound: the p99 nears the window before it grows)")


if __name__ == "__main__":
    main()
