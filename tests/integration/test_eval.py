"""svc_eval over the real broker: it evaluates the versions `policy` announces and the ones a
`control` evaluate names, skips (and counts) a version whose checkpoint is gone or whose weights do
not match, publishes each (set, version) once whatever kills it when, and gives the same result
every time it samples the same weights (a restart's redo, a replay); the monitor stores one row per
(run, set, version) however often a result arrives."""
from __future__ import annotations

import json
import shutil
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from google.protobuf import json_format

from m1flow.bus import Producer, codec
from m1flow.bus.topics import CONTROL, EVALS, POLICY, policy_key
from m1flow.checkpoint import uri_for, weights_sha256
from m1flow.contracts import events
from ops.control_cli import control_command
from ops.launcher import launch
from ops.topics_io import read_range
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.kafka
SUMS = {"generator": "arith", "name": "sums", "seed": 77, "prompts": 6, "samples": 4, "k": [1, 4],
        "config": {"max_operand": 12}}


def settings(tmp_path: Path, sets: list[dict], **extra) -> list[str]:
    path = tmp_path / f"run-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({"eval_sets": sets, **extra}))
    return ["--config", str(path)]


def announce(producer: Producer, run: str, version: int, directory: Path, sha: str) -> None:
    policy = events.PolicyVersion(header=codec.header("test", run_id=run, policy_version=version), version=version,
                                  checkpoint_uri=uri_for(directory), sha256=sha)
    producer.send(POLICY, policy_key(policy), policy)


def results(bootstrap: str, run: str, topic: str = "evals") -> list[dict]:
    return [r["value"] for r in read_range(bootstrap, topic) if r["value"].get("run_id") == run]


def by_key(values: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for v in values:
        out.setdefault(f"{v['set']}/v{int(v.get('policy_version', 0))}", []).append(v)
    return out


def outcome(value: dict) -> dict:
    """What a result says about the policy (not when, where or how fast it was computed)."""
    return {k: v for k, v in value.items() if k not in ("header", "duration_s", "trigger")}


def metric(proc, name: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{proc.info()['metrics_port']}/metrics", timeout=5).read().decode()
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith(name)}


def test_versions_are_evaluated_and_a_gone_or_altered_checkpoint_is_skipped_and_counted(tmp_path, bootstrap,
                                                                                         hybrid_policy):
    run = f"eval-{uuid.uuid4().hex[:6]}"
    policy = shutil.copytree(hybrid_policy, tmp_path / "policy")
    sha = weights_sha256(policy)
    producer = Producer(bootstrap, "test-eval")
    for version in (0, 1, 2):  # the same weights under three versions
        announce(producer, run, version, policy, sha)
    announce(producer, run, 3, tmp_path / "rotated-away", sha)
    announce(producer, run, 4, policy, "0" * 64)  # weights that are not the announced ones
    announce(producer, run, 5, policy, sha)
    producer.flush()
    proc = launch("eval", tmp_path, bootstrap, [*settings(tmp_path, [SUMS]), "--every-versions", "1",
                                                "--group-id", f"m1flow-eval-{run}"], run_id=run)
    try:
        want = {f"sums/v{v}" for v in (0, 1, 2, 5)}
        wait_for(lambda: set(by_key(results(bootstrap, run))) == want, 120, "results of v0-2 and v5",
                 detail=lambda: sorted(by_key(results(bootstrap, run))))
        skipped = metric(proc, "m1flow_eval_skipped_total")
        assert skipped.get('m1flow_eval_skipped_total{reason="missing"}') == 1.0, skipped
        assert skipped.get('m1flow_eval_skipped_total{reason="checksum"}') == 1.0, skipped
        assert proc.alive()

        check_scheduled_results(by_key(results(bootstrap, run)), policy, sha)
        check_requests_by_control(producer, proc, bootstrap, run, policy, want)
    finally:
        proc.stop()
        producer.close()


def check_scheduled_results(got: dict[str, list[dict]], policy: Path, sha: str) -> None:
    """One result per version, its numbers consistent, the same weights giving the same outcome."""
    assert all(len(copies) == 1 for copies in got.values())
    first = got["sums/v0"][0]
    assert first["prompts"] == 6 and first["samples"] == 4 and len(first["prompt_correct"]) == 6
    assert first["checkpoint_uri"] == uri_for(policy) and first["sha256"] == sha
    low, pass1, high = (first.get(k, 0.0) for k in ("pass1_low", "pass1", "pass1_high"))  # JSON leaves 0 out
    assert low <= pass1 <= high and high > 0
    ks = {k: first.get("pass_at_k", {}).get(k, 0.0) for k in ("1", "4")}
    assert ks["4"] >= ks["1"] == pytest.approx(pass1)
    # the same weights, the same seeds per (set, prompt): the same samples, the same verdicts
    assert all(outcome(got[k][0]) | {"policy_version": 0} == outcome(first) | {"policy_version": 0}
               for k in ("sums/v1", "sums/v2", "sums/v5"))


def check_requests_by_control(producer: Producer, proc, bootstrap: str, run: str, policy: Path, want: set) -> None:
    """A person asks for a version already done (nothing new), one never announced (skipped, counted)
    and a set that does not exist; then for v3's checkpoint once it exists."""
    for version, sets in ((1, []), (7, []), (5, ["nope"])):
        producer.send(CONTROL, "evaluate", control_command("evaluate", "test", version=version, sets=sets))
    shutil.copytree(policy, policy.parent / "rotated-away")
    producer.send(CONTROL, "evaluate", control_command("evaluate", "test", version=3))
    producer.flush()
    wait_for(lambda: "sums/v3" in by_key(results(bootstrap, run)), 60, "v3 evaluated on request")
    skipped = metric(proc, "m1flow_eval_skipped_total")
    assert skipped.get('m1flow_eval_skipped_total{reason="unknown_version"}') == 1.0, skipped
    assert skipped.get('m1flow_eval_skipped_total{reason="unknown_set"}') == 1.0, skipped
    got = by_key(results(bootstrap, run))
    assert sorted(got) == sorted(want | {"sums/v3"}) and all(len(c) == 1 for c in got.values())
    assert got["sums/v3"][0]["trigger"] == "control" and got["sums/v5"][0]["trigger"] == "schedule"


def test_a_kill_mid_version_redoes_only_what_was_not_published_and_a_replay_gives_the_same_results(
        tmp_path, bootstrap, hybrid_policy):
    run = f"eval-{uuid.uuid4().hex[:6]}"
    sha = weights_sha256(hybrid_policy)
    small = {**SUMS, "name": "a", "prompts": 4, "samples": 2, "k": [1, 2]}
    large = {**SUMS, "name": "b", "seed": 78, "prompts": 96, "samples": 4, "max_new_tokens": 16}  # seconds
    args = [*settings(tmp_path, [small, large]), "--every-versions", "1", "--batch-groups", "2",
            "--engine-slice-s", "0.05"]
    producer = Producer(bootstrap, "test-eval")
    announce(producer, run, 0, hybrid_policy, sha)
    producer.flush()
    group = f"m1flow-eval-{run}"
    first = launch("eval", tmp_path, bootstrap, [*args, "--group-id", group], run_id=run)
    wait_for(lambda: "evaluating b on policy v0" in first.tail(50), 120, "set b started", interval=0.05)
    # a's result is sent as b starts and acknowledged by that step's flush: wait for it on `evals` (b samples
    # for seconds), or the kill may land between the two and a is rightly redone
    wait_for(lambda: "a/v0" in by_key(results(bootstrap, run)), 30, "a's result on evals", interval=0.05)
    first.kill()  # kill -9 while b is sampled: a is out, b is not
    first.proc.wait(10)
    cut = by_key(results(bootstrap, run))
    assert sorted(cut) == ["a/v0"], f"b was not cut mid-version: {sorted(cut)}"

    second = launch("eval", tmp_path, bootstrap, [*args, "--group-id", group], run_id=run)
    try:
        wait_for(lambda: "b/v0" in by_key(results(bootstrap, run)), 120, "b evaluated after the restart")
        time.sleep(1)  # anything it would publish twice would be out by now
        log = second.tail(10_000)  # both processes' lines (one log file)
        assert log.count("evaluating a on policy v0") == 1 and log.count("evaluating b on policy v0") == 2
    finally:
        second.stop()
    got = by_key(results(bootstrap, run))
    assert sorted(got) == ["a/v0", "b/v0"] and all(len(c) == 1 for c in got.values()), {k: len(v) for k, v in got.items()}

    # a replay (a fresh group, its own output topic) samples everything again: the same results
    replay = launch("eval", tmp_path / "replay", bootstrap,
                    [*args, "--group-id", f"{group}-replay", "--output-suffix", "replay"], run_id=run)
    try:
        wait_for(lambda: sorted(by_key(results(bootstrap, run, "evals.replay"))) == ["a/v0", "b/v0"], 120,
                 "the replay's results")
    finally:
        replay.stop()
    again = by_key(results(bootstrap, run, "evals.replay"))
    for key in ("a/v0", "b/v0"):
        assert outcome(again[key][0]) == outcome(got[key][0]), key
    producer.close()


def test_held_out_rows_never_reach_training_and_the_monitor_keeps_one_row_per_result(tmp_path):
    """The whole loop with the stage beside it: the eval set is rows 0..7 of the training generator
    itself, so svc_source must drop them (and any row with the same prompt); the learner's versions are
    evaluated one after another; the monitor stores each result once, even when it arrives again."""
    from m1flow.data.dataset import DatasetConfig, open_source
    from m1flow.heldout import EvalSetConfig, load_set, prompt_key
    from ops.stack import Stack
    from tests.integration.helpers import policy_versions, scored_by_group

    arith = {"generator": "arith", "name": "arith", "seed": 3, "config": {"max_operand": 12}}
    held = {**arith, "prompts": 8, "samples": 4, "k": [1, 4]}
    run_settings = tmp_path / "run.json"
    run_settings.write_text(json.dumps({"sources": [{**arith, "size": 24}], "eval_sets": [held], "max_epochs": 1,
                                        "group_size": 4, "lead_steps": 2}))
    heldout = {prompt_key(p) for p in load_set(EvalSetConfig(**held))}
    training = [r.to_prompt(4) for _, r in open_source(DatasetConfig(**arith, size=24)).records()]
    kept = [p for p in training if prompt_key(p) not in heldout]
    assert 8 <= len(training) - len(kept) < 24
    stack = Stack(tmp_path, run_id="heldout", service_args={
        "learner": ["--batch-groups", "4", "--algorithm", '{"dynamic_sampling": false}'],
        "rollout": ["--max-ahead-versions", "0"], "source": ["--config", str(run_settings)],
        "eval": ["--config", str(run_settings), "--every-versions", "1"], "monitor": ["--dashboard-port", "-1"]})
    try:
        stack.start(services=("reward", "learner", "rollout", "source", "eval", "monitor"))  # no sandbox: arith
        boot = stack.bootstrap
        wait_for(lambda: len(scored_by_group(boot)) >= len(kept), 240, "every kept prompt scored")
        wait_for(lambda: max(policy_versions(boot)) >= 2, 120, "two trained versions")
        wait_for(lambda: {"arith/v0", "arith/v1", "arith/v2"} <= set(by_key(results(boot, "heldout"))), 120,
                 "v0, v1 and v2 evaluated")

        published = [r["value"] for r in read_range(boot, "prompts")]
        keys = {prompt_key(json_format.ParseDict(v, events.Prompt())) for v in published}
        assert not keys & heldout, "a held-out prompt was published for training"
        assert sorted(v["prompt_id"] for v in published) == sorted(p.prompt_id for p in kept)
        trained_on = {g[0]["prompt_id"] for g in scored_by_group(boot).values()}
        assert trained_on <= {v["prompt_id"] for v in published}
        dropped = metric(stack.get("source"), "m1flow_source_heldout_dropped_total")
        assert dropped == {'m1flow_source_heldout_dropped_total{source="arith"}': float(len(training) - len(kept))}

        check_monitor_keeps_one_row(boot, stack.get("monitor").grpc_address)
    finally:
        stack.stop()


def check_monitor_keeps_one_row(boot: str, monitor: str) -> None:
    """The monitor: one row per (set, version); the same results arriving again change nothing."""
    from m1flow.bus.lag import GroupLag
    from ops.control_cli import format_report
    from svc_monitor.client import report

    stored = lambda: {(r.set, r.policy_version): r for r in report(monitor).evals if r.run_id == "heldout"}  # noqa: E731
    wait_for(lambda: {("arith", v) for v in (0, 1, 2)} <= set(stored()), 60, "the results in the monitor")
    before = stored()
    producer = Producer(boot, "test-duplicates")
    for value in results(boot, "heldout"):
        again = json_format.ParseDict(value, events.EvalResult())
        producer.send(EVALS, f"heldout/{again.set}/v{again.policy_version}", again)
    producer.close()
    lag = GroupLag(boot, "test-lag")
    try:
        wait_for(lambda: lag.lag("m1flow-monitor", "evals") == 0, 60, "the monitor to read the copies")
    finally:
        lag.close()
    after = report(monitor).evals
    assert len([r for r in after if r.run_id == "heldout"]) == len(stored()) >= len(before)
    assert all(stored()[key].pass1 == row.pass1 for key, row in before.items())
    assert "held-out (svc_eval" in format_report(report(monitor))
