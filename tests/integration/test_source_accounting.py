"""Per-source accounting over a real broker: prompts of two sources (one plain text, one a system +
user chat conversation) go through rollout, reward and learner; rollouts and scored groups carry
each prompt's source and domain, the learner publishes its step metrics per {source, kind}, and the
monitor's report shows both sources, each with the accuracy of its own scored groups."""
from __future__ import annotations

from collections import defaultdict
from functools import partial

from m1flow.bus import Producer, codec
from m1flow.bus.topics import PROMPTS
from m1flow.checkpoint import load_tokenizer
from m1flow.contracts import events
from ops.stack import Stack
from m1flow.tasks.arith import problems
from svc_monitor.client import report

from tests.integration.helpers import records, scored_by_group, wait_for

PER_SOURCE, GROUP, BATCH = 4, 4, 4
SYSTEM = "You are a careful calculator."
SOURCES = {"plain": ("arith-plain", "reasoning"), "chat": ("arith-chat", "general")}


def publish_two_sources(producer: Producer) -> None:
    for i, p in enumerate(problems(seed=11, n=2 * PER_SOURCE, max_operand=20)):
        kind = "chat" if i % 2 else "plain"
        source, domain = SOURCES[kind]
        prompt = events.Prompt(header=codec.header("test"), prompt_id=f"{kind}-{i}", task_type="arith",
                               group_size=GROUP, verifier=events.VerifierSpec(kind="arith", gold=p.answer),
                               source=source, domain=domain)
        if kind == "chat":  # the conversation alone: the rollout takes the last user turn as the text
            prompt.messages.add(role="system", content=SYSTEM)
            prompt.messages.add(role="user", content=p.text)
        else:
            prompt.text = p.text
        producer.send(PROMPTS, prompt.prompt_id, prompt)
    producer.flush()


def accuracy_of(groups: list[dict]) -> float:
    verdicts = [s.get("correct", False) for g in groups for s in g["samples"] if "correct" in s]
    return sum(verdicts) / len(verdicts)


def learner_groups(bootstrap: str) -> dict[str, float]:
    """Groups per source the learner counted on `metrics` (all of kind arith)."""
    out: dict[str, float] = defaultdict(float)
    for rec in records(bootstrap, "metrics"):
        m = rec["value"]
        if m["name"] == "learner/source/groups":
            assert m["labels"]["kind"] == "arith"
            out[m["labels"]["source"]] += m.get("value", 0.0)
    return dict(out)


def monitor_rows(address: str) -> dict[str, list]:
    """The monitor's report rows per source."""
    out: dict[str, list] = defaultdict(list)
    for row in report(address).source_rows:
        out[row.source].append(row)
    return out


def test_two_sources_are_accounted_apart_from_prompt_to_report(tmp_path):
    stack = Stack(tmp_path, service_args={"learner": ["--batch-groups", str(BATCH),
                                                      "--algorithm", '{"dynamic_sampling": false, "max_staleness": 100}']})
    try:
        stack.start(services=("learner", "reward", "rollout", "monitor"))
        publish_two_sources(Producer(stack.bootstrap, "test"))
        wait_for(lambda: len(scored_by_group(stack.bootstrap)) >= 2 * PER_SOURCE, 240, "every group scored")

        tok = load_tokenizer(stack.initial_policy())
        for rec in records(stack.bootstrap, "rollouts"):
            r = rec["value"]
            kind = r["prompt_id"].split("-")[0]
            assert (r["source"], r["domain"]) == SOURCES[kind]
            prompt = tok.decode(r["prompt_token_ids"])
            assert (f"<|im_start|>system\n{SYSTEM}<|im_end|>" in prompt) == (kind == "chat")
            assert r["prompt_text"] and r["prompt_text"] in prompt  # the chat prompt's text: its user turn

        scored: dict[str, list[dict]] = defaultdict(list)
        for versions in scored_by_group(stack.bootstrap).values():
            g = versions[0]
            scored[g["source"]].append(g)
            assert g["domain"] == SOURCES[g["prompt_id"].split("-")[0]][1]
        assert {s: len(v) for s, v in scored.items()} == {"arith-plain": PER_SOURCE, "arith-chat": PER_SOURCE}

        # 8 groups, batches of 4, every group trained: each source's groups are counted once by the learner
        wait_for(lambda: learner_groups(stack.bootstrap) == {"arith-plain": PER_SOURCE, "arith-chat": PER_SOURCE},
                 180, "the learner's per-source group counts")

        address = stack.get("monitor").grpc_address
        per_source = partial(monitor_rows, address)
        wait_for(lambda: {s: sum(r.groups for r in rows) for s, rows in per_source().items()}
                 == {"arith-plain": PER_SOURCE, "arith-chat": PER_SOURCE}, 120, "both sources in the monitor")
        for source, rows in per_source().items():
            assert {r.kind for r in rows} == {"arith"}
            judged = sum(r.judged for r in rows)
            shown = sum(r.accuracy * r.judged for r in rows if r.HasField("accuracy")) / judged
            assert abs(shown - accuracy_of(scored[source])) < 1e-9, source
    finally:
        stack.stop()
