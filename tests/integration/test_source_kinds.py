"""Every verifier kind fed through the prompt source over the real broker, scored and trained on.

One stack run (sandbox, reward with a GenRM judge, learner, rollout, source) with one source config
mixing files of four formats and three generators: arith (JSONL rows, the generator), math in three of
verl's styles (a CSV in m1flow form: boxed and DAPO, one a chat conversation; a verl parquet of gsm8k
rows), code (a HumanEval function in the JSONL, stdin/stdout rows in a Hugging Face save_to_disk
directory), swe (a repository snapshot by task-store reference), genrm (the group's own reference, and
a fixed one), logic and rg (generators). The rollout policy is the tiny arithmetic warm start: it
answers every kind but arith wrong, in any form, which is fine. What must hold is that each kind's
groups reach `scored` with their kind, source and domain, and with verdicts that are that kind's
verifier's: no infrastructure failure; the same verdicts when the sampled responses are scored again;
the row's gold, under the spec that crossed the broker, scoring 1 (so the zeros are wrong answers, not
a verifier that cannot say yes); sums the policy cannot know scoring 0 beside easy ones it sometimes
gets right (arith checked without the verifier, genrm against the length judge by hand). The learner
trains on every group and names every source in its per-source metrics; nothing reaches `dlq`.
"""
from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from m1flow import chat
from m1flow.chat import after_reasoning
from m1flow.contracts import events
from m1flow.data import DatasetConfig, open_source
from m1flow.kinds import gold_response
from m1flow.data.record import RowError, TaskRecord
from m1flow.status import Status
from m1flow.task_store import TaskStore, TaskStoreConfig

from tests.data.rows import SUM_PROGRAM, SUM_TESTS, humaneval_row, row, swe_row, write
from tests.integration.helpers import policy_versions, records, scored_by_group, wait_for

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
GROUP, BATCH = 2, 4
GENRM = {"judge": "length"}  # the heuristic judge (no model): the longer answer wins, equal lengths tie
REFERENCE = "xy"  # a genrm row's fixed reference answer: answers longer than 2 characters beat it
EASY = [(3, 4), (7, 5), (9, 2), (6, 8)]  # operands the warm start was trained on: sometimes right
HARD = [(48213, 90417), (70932, 18865)]  # five digits: the warm start cannot know these sums
# an answer in each family's form that is wrong for every row of this test (arith: checked by hand)
WRONG = {"math": "The answer is $\\boxed{-987654}$.", "logic": "<answer>-987654</answer>",
         "rg": "<answer>-987654</answer>", "code": "```python\nprint(-987654)\n```",
         "swe": "```diff\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n"
                "+    return a * b\n```"}
# source -> (verifier kind, domain) of every group it must produce
EXPECTED = {"sums": ("arith", "reasoning"), "algebra": ("math", "reasoning"), "humaneval": ("code", "reasoning"),
            "repo": ("swe", "reasoning"), "chat": ("genrm", "general"), "gsm8k": ("math", "reasoning"),
            "stdio": ("code", "reasoning"), "arith": ("arith", "reasoning"),
            "logic:boolean_expressions": ("logic:boolean_expressions", "reasoning"),
            "rg:leg_counting": ("rg:leg_counting", "reasoning")}


def jsonl_rows(tmp_path: Path, store: TaskStore) -> list[dict[str, Any]]:
    """m1flow form, one source per kind: sums the policy knows and cannot know, a HumanEval function,
    an SWE task, two open prompts (one judged against a fixed reference)."""
    sums = [row("sums", f"easy{i}", f"{a}+{b}=", "arith", str(a + b)) for i, (a, b) in enumerate(EASY)]
    sums += [row("sums", f"hard{i}", f"{a}+{b}=", "arith", str(a + b)) for i, (a, b) in enumerate(HARD)]
    chat = [row("chat", "open", "Write a haiku about streams.", "genrm", domain="general"),  # reference: the best
            row("chat", "fixed", "Describe a river in one line.", "genrm", spec={"candidates": [REFERENCE]},
                domain="general")]
    return sums + [humaneval_row("HumanEval/34"), swe_row(tmp_path, store)] + chat


def write_sources(tmp_path: Path, store: TaskStore) -> list[DatasetConfig]:
    """The files (JSONL, CSV, verl parquet, HF save_to_disk directory) and generators of one mixture."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_fixtures import verl_rows

    mixed = write(tmp_path / "jsonl", "jsonl", jsonl_rows(tmp_path, store))
    algebra = write(tmp_path / "csv", "csv", [
        row("algebra", "frac", "What is $\\frac{1}{2} + \\frac{1}{4}$? Put it in \\boxed{}.", "math", "\\frac{3}{4}",
            {"style": "boxed"}),
        row("algebra", "linear", [{"role": "system", "content": "You are a careful mathematician."},
                                  {"role": "user", "content": "Solve 2x + 3 = 11. End with 'Answer: x'."}],
            "math", "4", {"style": "math_dapo"})])
    pq.write_table(pa.Table.from_pylist(verl_rows(3)), tmp_path / "gsm8k.parquet")  # verl's gsm8k rows: math, `####`
    stdio = write(tmp_path / "hf", "hf-save", [  # rows without a source: the dataset's name
        row("", f"sum{i}", "Read two integers on one line and print their sum.", "code", SUM_PROGRAM,
            {"tests": SUM_TESTS[i:] + SUM_TESTS[:i]}) for i in range(2)])
    return [DatasetConfig(path=str(mixed), name="mixed"), DatasetConfig(path=str(algebra), name="algebra"),
            DatasetConfig(path=str(tmp_path / "gsm8k.parquet")), DatasetConfig(path=str(stdio), name="stdio"),
            DatasetConfig(generator="arith", size=3, seed=2, config={"max_operand": 12}),
            DatasetConfig(generator="logic:boolean_expressions", size=2, seed=3),
            DatasetConfig(generator="rg:leg_counting", size=2, seed=4)]


def every_record(sources: list[DatasetConfig]) -> dict[str, TaskRecord]:
    """prompt id -> the record the source will publish (read here the way svc_source reads it)."""
    out = {}
    for cfg in sources:
        for index, item in open_source(cfg).records():
            assert not isinstance(item, RowError), item
            out[f"{item.source}/{item.id}"] = item
    return out


def rollouts_by_id(bootstrap: str) -> dict[str, events.Rollout]:
    return {r["value"]["rollout_id"]: json_format.ParseDict(r["value"], events.Rollout(), ignore_unknown_fields=True)
            for r in records(bootstrap, "rollouts")}


def learner_per_source(bootstrap: str, name: str) -> dict[tuple[str, str], float]:
    """(source, kind) -> the learner's `learner/source/<name>` summed over its steps."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for rec in records(bootstrap, "metrics"):
        m = rec["value"]
        if m["name"] == f"learner/source/{name}":
            out[(m["labels"]["source"], m["labels"]["kind"])] += m.get("value", 0.0)
    return dict(out)


def sample_verdict(sample: dict) -> tuple[str, float, bool | None]:
    return sample.get("status", "STATUS_UNSPECIFIED"), round(sample.get("reward", 0.0), 5), sample.get("correct")


def result_verdict(result: Any) -> tuple[str, float, bool | None]:
    return events.Status.Name(int(result.status)), round(result.reward, 5), result.correct


def test_every_kind_fed_through_the_source_is_scored_by_its_verifier_and_trained_on(tmp_path):
    from ops.stack import Stack
    from svc_reward.client import LocalScorer, RewardConfig

    sources = write_sources(tmp_path, TaskStore.in_run_dir(tmp_path))  # the run's task store: the SWE snapshot
    expected = every_record(sources)
    assert {r.source for r in expected.values()} == set(EXPECTED) and len(expected) % BATCH == 0
    settings = tmp_path / "sources.json"
    settings.write_text(json.dumps({"sources": [s.model_dump() for s in sources], "max_epochs": 1,
                                    "group_size": GROUP, "batch_groups": BATCH}))
    stack = Stack(tmp_path, service_args={
        "source": ["--config", str(settings)], "reward": ["--genrm", json.dumps(GENRM)],
        # every group trainable, whatever the interleaving: no dynamic sampling, and no sample too stale
        # for a run of this many steps (staleness is not what this test is about)
        "learner": ["--batch-groups", str(BATCH), "--batch-timeout-s", "5",
                    "--algorithm", json.dumps({"dynamic_sampling": False, "max_staleness": 100})]})
    try:
        stack.start(services=("sandbox", "reward", "learner", "rollout", "source"))
        wait_for(lambda: len(scored_by_group(stack.bootstrap)) >= len(expected), 300, "every row scored")
        steps = len(expected) // BATCH
        wait_for(lambda: max(policy_versions(stack.bootstrap)) >= steps, 120, f"{steps} policy versions")
        wait_for(lambda: sum(learner_per_source(stack.bootstrap, "groups").values()) >= len(expected), 60,
                 "the learner's per-source metrics of every group")

        groups = [versions[0] for versions in scored_by_group(stack.bootstrap).values()]
        assert sorted(g["prompt_id"] for g in groups) == sorted(expected)  # every row once, nothing else
        by_source: Counter[tuple[str, str]] = Counter()
        for g in groups:
            record = expected[g["prompt_id"]]
            kind, domain = EXPECTED[record.source]
            got = (g["verifier_kind"], g["source"], g.get("domain", ""))
            assert got == (kind, record.source, domain), g["prompt_id"]
            assert len(g["samples"]) == GROUP and not g.get("incomplete"), g["prompt_id"]
            by_source[(record.source, kind)] += 1

        # the learner trained on every group (no dynamic sampling: each group is trainable) and names each source
        assert learner_per_source(stack.bootstrap, "groups") == by_source
        assert learner_per_source(stack.bootstrap, "samples_trained") == {k: GROUP * n for k, n in by_source.items()}
        assert max(policy_versions(stack.bootstrap)) == steps
        assert records(stack.bootstrap, "dlq") == []

        rollouts = rollouts_by_id(stack.bootstrap)
        sandbox = stack.get("sandbox").grpc_address
        with LocalScorer(RewardConfig(sandbox_address=sandbox, genrm=GENRM,  # the run's task store, as the service
                                     task_store=TaskStoreConfig(root=TaskStore.in_run_dir(tmp_path).root))) as scorer:
            check_verdicts(groups, expected, rollouts, scorer)
    finally:
        stack.stop()


def check_verdicts(groups: list[dict], expected: dict[str, TaskRecord], rollouts: dict[str, events.Rollout],
                   scorer: Any) -> None:
    """Each group's verdicts are its kind's verifier's on what the policy wrote, and that verifier,
    on the spec that crossed the broker, gives the row's gold full reward and a wrong answer less."""
    arith: list[tuple[str, bool]] = []
    for g in groups:
        record = expected[g["prompt_id"]]
        samples = sorted(g["samples"], key=lambda s: s.get("index", 0))
        sampled = [rollouts[s["rollout_id"]] for s in samples]
        spec = sampled[0].verifier
        assert all(r.verifier == spec for r in sampled) and spec.kind == record.verifier.kind
        for s in samples:  # a verdict, never an infrastructure failure (no judge, no sandbox, a timeout)
            status = Status[s.get("status", "STATUS_UNSPECIFIED").removeprefix("STATUS_")]
            assert status is not Status.UNSPECIFIED and not status.is_infra_failure, (g["prompt_id"], s)
        again = scorer.score_group(sampled[0].prompt_text, [r.response_text for r in sampled], spec)
        assert [sample_verdict(s) for s in samples] == [result_verdict(r) for r in again], g["prompt_id"]
        if record.verifier.family == "genrm":  # the length judge by hand: a longer answer never scores below a shorter
            lengths = [len(after_reasoning(r.response_text)) for r in sampled]
            parts = [s.get("parts", {}).get("genrm", 0.0) for s in samples]
            assert all(parts[i] >= parts[j] for i in range(GROUP) for j in range(GROUP) if lengths[i] > lengths[j])
            if record.verifier.spec.get("candidates"):  # against the fixed reference: +1 longer, 0 as long, -1 shorter
                assert parts == [float((n > len(REFERENCE)) - (n < len(REFERENCE))) for n in lengths], (lengths, parts)
            continue
        gold = scorer.score(gold_response(record), spec)  # the spec that crossed the broker can say yes ...
        assert (gold.status, gold.reward, gold.correct) == (Status.OK, 1.0, True), (g["prompt_id"], gold.detail)
        if record.verifier.family in WRONG:  # ... and no, to a well-formed wrong answer
            wrong = scorer.score(chat.response_text(WRONG[record.verifier.family]), spec)
            assert wrong.usable and wrong.reward < 1.0 and wrong.correct is not True, (g["prompt_id"], wrong.detail)
        if record.verifier.family == "arith":  # checked here without the verifier: the answer is the gold
            for s, r in zip(samples, sampled):
                right = after_reasoning(r.response_text).strip() == record.verifier.gold
                assert s.get("correct", False) == right, (g["prompt_id"], r.response_text)
                arith.append((record.id, right))
    assert not any(right for id_, right in arith if id_.startswith("hard"))  # the sums it cannot know
    assert any(right for _, right in arith), "the warm start never got an easy sum right: rewards all equal"
