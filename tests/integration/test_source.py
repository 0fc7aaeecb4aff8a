"""svc_source over the real broker: a kill -9 mid-run loses and repeats nothing, the lead stops it
while the rollout group lags, bad rows go to `dlq` and /metrics (a row the bus refuses too, its batch
not sent again), a replay repeats the sequence, and a source that cannot be opened stops the service
with one line."""
from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pytest

from m1flow.bus.admin import end_offsets
from ops.launcher import launch
from ops.topics_io import read_range
from tests.integration.helpers import commit_end, wait_for

pytestmark = pytest.mark.kafka


def source_config(tmp_path: Path, sources: list[dict], **settings) -> list[str]:
    path = tmp_path / f"source-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({"sources": sources, **settings}))
    return ["--config", str(path)]


def drawn(bootstrap: str, topic: str, stream: str, start: dict[int, int] | None = None) -> list[tuple]:
    """(draw, source, epoch, position, prompt_id, text) of the prompts `stream` published, by draw."""
    out = []
    for rec in read_range(bootstrap, topic):
        if start and rec["offset"] < start.get(rec["partition"], 0):
            continue
        value = rec.get("value", {})
        origin = value.get("origin", {})
        if origin.get("stream") == stream:
            out.append((int(origin.get("draw", 0)), origin["source"], int(origin.get("epoch", 0)),
                        int(origin.get("position", 0)), value["prompt_id"], value["text"]))
    return sorted(out)


def published(bootstrap: str, topic: str = "prompts") -> int:
    return sum(end_offsets(bootstrap, topic).values())


def metric(proc, name: str) -> str:
    port = proc.info()["metrics_port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return "\n".join(line for line in text.splitlines() if line.startswith(name))


def test_kill9_mid_run_then_restart_publishes_every_position_exactly_once(tmp_path, bootstrap):
    n, run = 20_000, f"dur-{uuid.uuid4().hex[:6]}"
    args = source_config(tmp_path, [{"generator": "arith", "name": "arith", "size": n, "seed": 4}],
                         max_epochs=1, lead_steps=0, publish_batch=16)
    before = end_offsets(bootstrap, "prompts")
    first = launch("source", tmp_path, bootstrap, args, run_id=run)
    wait_for(lambda: published(bootstrap) - sum(before.values()) > 1500, 60, "the first prompts", interval=0.05)
    first.kill()
    first.proc.wait(10)
    cut = published(bootstrap) - sum(before.values())
    assert cut < n, "the source finished before the kill: nothing was tested"
    second = launch("source", tmp_path, bootstrap, args, run_id=run)
    try:
        wait_for(lambda: "every source exhausted" in second.tail(), 120, "the rest published")
    finally:
        second.stop()
    rows = drawn(bootstrap, "prompts", f"{run}/m1flow-source", before)
    assert [r[0] for r in rows] == list(range(n))  # every draw once: nothing lost, nothing repeated
    assert sorted(r[3] for r in rows) == list(range(n)) and {r[2] for r in rows} == {0}
    assert "draws past it already on `prompts`" in second.tail(100)


def test_the_lead_holds_publishing_until_the_rollout_group_consumes(tmp_path, bootstrap):
    group, run = f"lead-{uuid.uuid4().hex[:6]}", f"lead-{uuid.uuid4().hex[:6]}"
    args = source_config(tmp_path, [{"generator": "arith", "name": "arith", "size": 1000}],
                         lead_steps=1, batch_groups=8, rollout_group=group, lag_refresh_s=0.2)
    before = published(bootstrap)
    proc = launch("source", tmp_path, bootstrap, args, run_id=run)
    try:
        wait_for(lambda: "held: lead full" in proc.tail(), 30, "the lead to fill")
        limit = int(float(metric(proc, "m1flow_source_lead_limit").split()[-1]))
        assert published(bootstrap) - before == limit  # a group that never committed: its own prompts count
        commit_end(bootstrap, group)  # the rollout group consumed everything
        wait_for(lambda: published(bootstrap) - before >= 2 * limit, 30, "a second lead's worth", interval=0.2)
        wait_for(lambda: proc.tail().count("held: lead full") >= 2, 30, "the lead to fill again")
        assert published(bootstrap) - before == 2 * limit
    finally:
        proc.stop()


def test_bad_rows_are_skipped_counted_and_dead_lettered(tmp_path, bootstrap):
    good = {"id": "g1", "source": "mini", "prompt": "2+2=", "verifier": {"kind": "arith", "gold": "4"}}
    lines = [json.dumps(good), "{not json", json.dumps({**good, "id": "g2", "verifier": {"kind": "math"}}),
             json.dumps({**good, "id": "g3", "verifier": {"kind": "astrology", "gold": "1"}}),
             json.dumps({**good, "id": "g4", "prompt": "3+3=", "verifier": {"kind": "arith", "gold": "6"}})]
    data = tmp_path / "mini.jsonl"
    data.write_text("\n".join(lines) + "\n")
    suffix = f"bad{uuid.uuid4().hex[:6]}"
    args = source_config(tmp_path, [{"path": str(data), "name": "mini"}], max_epochs=1, lead_steps=0,
                         output_suffix=suffix)
    proc = launch("source", tmp_path, bootstrap, args, run_id="bad")
    try:
        wait_for(lambda: "every source exhausted" in proc.tail(), 30, "the file read")
        counted = metric(proc, "m1flow_source_bad_rows_total")
    finally:
        proc.stop()
    prompts = drawn(bootstrap, f"prompts.{suffix}", "bad/m1flow-source")
    assert sorted(p[4] for p in prompts) == ["mini/g1", "mini/g4"]
    letters = [r["value"] for r in read_range(bootstrap, f"dlq.{suffix}")]
    assert sorted(int(l.get("offset", 0)) for l in letters) == [1, 2, 3]
    # the file by its name, never its host folders (the source's log has the whole path)
    assert all(l["source_topic"] == "source:mini" and data.name in l["error"] and str(data.parent) not in l["error"]
               for l in letters)
    reasons = " ".join(l["error"] for l in letters)
    assert "gold" in reasons and "astrology" in reasons
    assert sum(float(line.split()[-1]) for line in counted.splitlines() if 'source="mini"' in line) == 3


def test_a_row_the_bus_refuses_is_dead_lettered_and_the_source_goes_on(tmp_path, bootstrap):
    """A row whose prompt is just over the bus's record limit (m1flow.bus.limits), among normal rows:
    its dead letter (file, row, reason) goes in its place and is counted, every other row reaches
    `prompts` exactly once (its batch is not sent again for it) and the source goes on to the end."""
    from m1flow.bus.limits import MESSAGE_MAX_BYTES

    rows = [{"id": f"r{i}", "source": "huge", "prompt": f"{i}+1=", "verifier": {"kind": "arith", "gold": str(i + 1)}}
            for i in range(40)]
    rows[5]["prompt"] = "x" * MESSAGE_MAX_BYTES + " 5+1="  # the framed Prompt: a few hundred bytes over
    data = tmp_path / "huge.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    suffix = f"huge{uuid.uuid4().hex[:6]}"
    args = source_config(tmp_path, [{"path": str(data), "name": "huge"}], max_epochs=1, lead_steps=0,
                         publish_batch=8, block_rows=16, output_suffix=suffix)
    proc = launch("source", tmp_path, bootstrap, args, run_id="huge")
    try:
        wait_for(lambda: "every source exhausted" in proc.tail(), 60, "the file read")
        published = 'm1flow_source_prompts_total{source="huge"}'  # counted as the broker acknowledges them
        wait_for(lambda: metric(proc, published).endswith(" 39.0"), 30, "the last batches acknowledged",
                 detail=lambda: metric(proc, published))
        counted = metric(proc, "m1flow_source_bad_rows_total")
        sent = metric(proc, published)
        assert proc.proc.poll() is None  # still serving
        log = proc.tail(400)
    finally:
        proc.stop()
    prompts = drawn(bootstrap, f"prompts.{suffix}", "huge/m1flow-source")
    assert sorted(p[4] for p in prompts) == sorted(f"huge/r{i}" for i in range(40) if i != 5)  # each once
    refused_draw = sorted(set(range(40)) - {p[0] for p in prompts})
    assert len(refused_draw) == 1 and refused_draw[0] < 32  # drawn early: the rows after it went on
    letters = [r["value"] for r in read_range(bootstrap, f"dlq.{suffix}")]
    assert len(letters) == 1 and letters[0]["source_topic"] == "source:huge" and int(letters[0]["offset"]) == 5
    assert letters[0]["error"].startswith(f"{data.name}:5: prompt: refused by the bus: record too large: ")
    assert f"over the bus's limit of {MESSAGE_MAX_BYTES:,}" in letters[0]["error"]
    assert 'reason="too_large",source="huge"} 1.0' in counted or 'source="huge",reason="too_large"} 1.0' in counted
    assert float(sent.split()[-1]) == 39
    assert "sending them again" not in log and "not delivered" not in log


def test_a_replay_with_a_fresh_state_reproduces_the_sequence(tmp_path, bootstrap):
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "source": "tiny", "prompt": f"{i}+1=",
                                        "verifier": {"kind": "arith", "gold": str(i + 1)}}) + "\n" for i in range(30)))
    sources = [{"path": str(data), "name": "tiny", "weight": 1.0},
               {"generator": "arith", "name": "arith", "size": 50, "weight": 2.0}]
    runs = []
    for i in range(2):
        suffix = f"replay{uuid.uuid4().hex[:6]}"
        args = source_config(tmp_path, sources, seed=9, max_epochs=2, lead_steps=0, block_rows=8,
                             output_suffix=suffix)
        proc = launch("source", tmp_path / f"run{i}", bootstrap, args, run_id="replay")
        try:
            wait_for(lambda: "every source exhausted" in proc.tail(), 30, "both sources exhausted")
        finally:
            proc.stop()
        runs.append(drawn(bootstrap, f"prompts.{suffix}", "replay/m1flow-source"))
    assert len(runs[0]) == 2 * (30 + 50)
    assert [r[4:] for r in runs[0]] == [r[4:] for r in runs[1]]  # same (prompt_id, text), same order
    assert {r[1] for r in runs[0][:20]} == {"tiny", "arith"}  # interleaved, not one source after the other
    assert [r[4] for r in runs[0] if r[1] == "tiny"][:30] != [f"tiny/{i}" for i in range(30)]  # shuffled


def test_a_source_that_cannot_be_opened_stops_the_service_with_one_line(tmp_path, bootstrap):
    args = source_config(tmp_path, [{"path": str(tmp_path / "missing.jsonl")}])
    with pytest.raises(RuntimeError, match=r"exited with [1-9]") as err:
        launch("source", tmp_path, bootstrap, args, run_id="unreadable")
    assert "cannot be opened" in str(err.value) and "missing.jsonl" in str(err.value)


def test_a_dataset_and_a_generator_fed_through_the_source_are_scored_and_trained_on(tmp_path):
    """The loop with the source in front: a JSONL file and the arith generator, interleaved by
    weight, sampled by the rollout service, scored by the reward service, trained on by the learner."""
    from ops.stack import Stack
    from tests.integration.helpers import policy_versions, scored_by_group

    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i}", "source": "sums", "prompt": f"{i}+{i}=",
                                        "verifier": {"kind": "arith", "gold": str(2 * i)}}) + "\n" for i in range(8)))
    settings = tmp_path / "sources.json"
    settings.write_text(json.dumps({"sources": [{"path": str(data), "name": "sums"},
                                                {"generator": "arith", "size": 8, "seed": 2}],
                                    "max_epochs": 1, "group_size": 4, "lead_steps": 2}))
    stack = Stack(tmp_path, service_args={"learner": ["--batch-groups", "4", "--algorithm", '{"dynamic_sampling": false}'],
                                          "rollout": ["--max-ahead-versions", "0"],
                                          "source": ["--config", str(settings)]})
    try:
        stack.start(services=("learner", "reward", "rollout", "source"))
        wait_for(lambda: len(scored_by_group(stack.bootstrap)) >= 16, 240, "all 16 groups scored")
        wait_for(lambda: max(policy_versions(stack.bootstrap)) >= 3, 120, "three policy versions")
        scored = scored_by_group(stack.bootstrap)
        sources = sorted({v[0]["prompt_id"].split("/")[0] for v in scored.values()})
        assert sources == ["arith", "sums"]
        assert sorted(v[0]["prompt_id"] for v in scored.values() if v[0]["prompt_id"].startswith("sums/")) == \
            sorted(f"sums/s{i}" for i in range(8))
        assert all(len(v) == 1 and len(v[0]["samples"]) == 4 for v in scored.values())
    finally:
        stack.stop()


def test_feed_dataset_publishes_a_file_once_through_the_same_record_path(tmp_path, bootstrap):
    import subprocess
    import sys

    from ops import ROOT

    data = tmp_path / "feedme.jsonl"
    rows = [{"id": f"f{i}", "source": "feedme", "prompt": f"{i}*2=", "verifier": {"kind": "arith", "gold": str(2 * i)}}
            for i in range(4)]
    data.write_text("\n".join([json.dumps(r) for r in rows[:2]] + ["{broken"] + [json.dumps(r) for r in rows[2:]]) + "\n")
    before = end_offsets(bootstrap, "prompts")
    out = subprocess.run([sys.executable, "-m", "ops", "--bootstrap", bootstrap, "feed", "--dataset", str(data),
                          "--n", "4", "--group-size", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert "published 3 prompts" in out.stdout and "1 bad rows sent to dlq" in out.stdout
    fed = [r["value"] for r in read_range(bootstrap, "prompts")
           if r["offset"] >= before.get(r["partition"], 0) and r["value"]["prompt_id"].startswith("feedme/")]
    assert sorted(v["prompt_id"] for v in fed) == ["feedme/f0", "feedme/f1", "feedme/f2"]  # the first 4 rows, one bad
    assert all(v["source"] == "feedme" and v["group_size"] == 2 and v["verifier"]["gold"] for v in fed)
