"""The attacks of the second security pass on `policy`, over the real secure broker (TLS, client
certificates, the ACLs of ops/acls.py), against every consumer of the topic running as a process
with its own identity: svc_rollout, svc_source, svc_monitor and svc_eval.

The attacker writes `policy` as the learner's Kafka principal (an insider holding the learner's
certificate, or anyone the ACLs let write there), without the learner's signing key unless a test
says otherwise. Each test failed on the code before it:

* a refused record still acted: an unsigned one raised svc_source's lead and switched the rollout's
  backpressure off, the monitor stored its version (it checked nothing), and the learner's own
  signature held on a record whose `batch_groups` was changed (it covered version, URI, SHA only);
* a record that failed to load hid the genuine record of the same version number;
* the watcher applied `policy` and `control` in the order of a timestamp the sender wrote;
* compaction under one key left a forged record as the only announcement a restarted replica found.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import time
import urllib.request
from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from m1flow.bus import Producer, codec
from m1flow.bus.topics import CONTROL, POLICY, policy_key
from m1flow.checkpoint import uri_for, weights_sha256
from m1flow.contracts import events
from m1flow.security import config as security
from m1flow.security.announcements import sign
from m1flow.security.pki import signing_key
from ops.control_cli import control_command
from ops.stack import Stack
from ops.topics_io import read_range
from tests.integration.helpers import wait_for
from tests.security.test_broker_acls import block

RUN = "local"
BATCH = 2  # the learner's batch_groups in every genuine announcement, and the services' own setting
LEAD_STEPS = 2
FORGED_VERSION = 2_000_000  # a multiple of svc_eval's every_versions: the code before scheduled a job for it
CONSUMERS = ("rollout", "source", "monitor", "eval")


def metrics(proc) -> dict[str, float]:  # noqa: ANN001 - a ServiceProcess
    text = urllib.request.urlopen(f"http://127.0.0.1:{proc.info()['metrics_port']}/metrics", timeout=5).read()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.decode().splitlines() if line and not line.startswith("#")}


def refused(proc, reason: str) -> float:  # noqa: ANN001
    return metrics(proc).get(f'm1flow_policy_refused_total{{reason="{reason}"}}', 0.0)


class Run:
    """The secure stack, the learner's producer and key, and the genuine announcements made so far."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.learner = Producer(stack.bootstrap, "learner-0", security=block(stack.secrets, "learner"))
        self.key, _ = signing_key(stack.secrets, "learner")
        # the learner's own announcements name weights under its checkpoint folder (the replicas' roots)
        self.policy0 = stack.checkpoint_roots()[0] / "v000000"
        if not self.policy0.exists():
            shutil.copytree(stack.initial_policy(), self.policy0)
        self.sha0 = weights_sha256(self.policy0)

    def record(self, version: int, directory: Path, sha: str, **fields) -> events.PolicyVersion:
        return events.PolicyVersion(header=codec.header("learner", run_id=RUN, policy_version=version),
                                    version=version, checkpoint_uri=uri_for(directory), sha256=sha,
                                    **{"batch_groups": BATCH, **fields})

    def publish(self, *records: events.PolicyVersion, key: bytes | None = None) -> None:
        """As the learner's principal; under the learner's key scheme unless `key` is given."""
        for policy in records:
            self.learner.send(POLICY, key if key is not None else policy_key(policy), policy)
        self.learner.flush()

    def proc(self, name: str):  # noqa: ANN201
        return self.stack.get(name)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("policy-attacks")
    source = root / "source.json"
    source.write_text(json.dumps({"sources": [{"generator": "arith", "name": "arith", "size": 1000}],
                                  "group_size": 2, "lead_steps": LEAD_STEPS, "batch_groups": BATCH,
                                  "publish_batch": 2, "lag_refresh_s": 0.2}))
    evals = root / "eval.json"
    evals.write_text(json.dumps({"eval_sets": [{"generator": "arith", "name": "sums", "prompts": 2, "samples": 1}],
                                 "every_versions": 1_000_000}))
    stack = Stack(root / "run", secure=True, run_id=RUN, service_args={
        "rollout": ["--group-size", "2", "--max-new-tokens", "4", "--learner-batch-groups", str(BATCH),
                    "--max-ahead-versions", "0", "--batch-margin-sd", "0", "--policy-retry-s", "600"],
        "source": ["--config", str(source)], "eval": ["--config", str(evals)]})
    before = security.current()
    try:
        stack.start_broker()  # this process acts as the operator (`admin`) from here on
        state = Run(stack)
        state.publish(sign(state.record(1, state.policy0, state.sha0), state.key))
        started = [stack.start_service(name, wait=False) for name in CONSUMERS]
        for proc in started:
            proc.wait_ready()
        yield state
    finally:
        stack.stop()
        security.activate(before)


def lead_limit(run: Run) -> float:
    return metrics(run.proc("source")).get("m1flow_source_lead_limit", -1.0)


def stored_versions(run: Run) -> list[int]:
    with sqlite3.connect(run.stack.run_dir / "monitor.db") as db:
        return sorted(v for (v,) in db.execute("select version from policies"))


def admission(run: Run) -> str:
    """The rollout's last admission state from its log ('held: ...' or 'open')."""
    lines = [line for line in run.proc("rollout").tail(400).splitlines() if "admission " in line]
    return lines[-1].split("admission ", 1)[1] if lines else ""


def test_a_refused_record_changes_nothing_and_is_counted_by_every_consumer(run: Run) -> None:
    """Finding 1: an unsigned record with batch_groups=1,000,000, and the learner's own signature
    on a copy of v1 with batch_groups changed; neither may move the lead, the backpressure, the
    monitor's versions or svc_eval's jobs, and each consumer counts both on /metrics."""
    wait_for(lambda: 1 in stored_versions(run) and "ahead of the learner" in admission(run), 90,
             "the monitor storing v1 and the rollout held back by its backpressure",
             detail=lambda: (stored_versions(run), admission(run)))
    assert lead_limit(run) == LEAD_STEPS * BATCH

    unsigned = run.record(FORGED_VERSION, run.policy0, run.sha0, batch_groups=1_000_000,
                          stats={"groups_consumed": 1e6})
    moved = run.record(1, run.policy0, run.sha0)
    moved.signature = sign(run.record(1, run.policy0, run.sha0), run.key).signature
    moved.batch_groups = 1_000_000  # after signing: v1's version, URI and SHA-256 are unchanged
    run.publish(unsigned, moved, key=b"policy")

    def counted() -> dict[str, tuple[float, float]]:
        return {n: (refused(run.proc(n), "unsigned"), refused(run.proc(n), "bad_signature")) for n in CONSUMERS}

    def acted() -> dict[str, object]:
        return {"lead_limit": lead_limit(run), "monitor": stored_versions(run), "rollout": admission(run),
                "eval_skipped": {k: v for k, v in metrics(run.proc("eval")).items() if "skipped_total{" in k}}

    wait_for(lambda: all(min(c) >= 1 for c in counted().values()) or acted()["lead_limit"] != LEAD_STEPS * BATCH
             or FORGED_VERSION in acted()["monitor"], 60, "every consumer refusing both records",
             detail=lambda: (counted(), acted()))
    time.sleep(1.0)  # what a refused record would have done, it would have done by now
    state = acted()
    assert state["lead_limit"] == LEAD_STEPS * BATCH, state  # the source's lead: not 2,000,000
    assert "ahead of the learner" in state["rollout"], state  # the backpressure: still on
    assert state["monitor"] == [1], state  # no forged version stored (nor any staleness from it)
    assert not state["eval_skipped"], state  # no job was made of it (nor an `eval/skipped` on `metrics`)
    assert counted() == {n: (1.0, 1.0) for n in CONSUMERS}


def test_a_version_that_fails_to_load_does_not_hide_the_genuine_record(run: Run) -> None:
    """Finding 4: with the learner's key, v2 with a wrong SHA-256 first, then the genuine v2: the
    replica loads v2 (the first record of a number used to win, and the genuine one was skipped)."""
    directory = run.stack.run_dir / "learner" / "checkpoints" / "v000002"
    shutil.copytree(run.policy0, directory)
    bad = sign(run.record(2, directory, "0" * 64), run.key)
    genuine = sign(run.record(2, directory, run.sha0), run.key)
    run.publish(bad, genuine)
    rollout = run.proc("rollout")
    wait_for(lambda: "loaded policy version 2 " in rollout.tail(400), 60, "the rollout loading the genuine v2",
             detail=lambda: rollout.tail(5))
    assert rollout.alive()
    wait_for(lambda: 2 in stored_versions(run), 30, "the monitor storing v2")
    assert lead_limit(run) == LEAD_STEPS * BATCH


def windows_set(proc, since: int) -> list[str]:  # noqa: ANN001
    """The output windows the rollout set, in order, from its log after byte `since`."""
    with open(proc.log_path, "rb") as log:
        log.seek(since)
        lines = log.read().decode(errors="replace").splitlines()
    return [line.split("output window set to ", 1)[1].split()[0] for line in lines if "output window set to" in line]


def test_a_restarted_replica_applies_the_state_topics_in_the_brokers_order(run: Run) -> None:
    """Finding 4: a command stamped a day ahead by its sender, then the operator's later one: a
    restarted replica ends with the operator's (the watcher sorted by the sender's timestamp, so the
    stamped one was applied last and won)."""
    ahead = control_command("window", "stamped a day ahead", max_new_tokens=6)
    ahead.header.created_unix_ms += 86_400_000
    monitor = Producer(run.stack.bootstrap, "monitor-0", security=block(run.stack.secrets, "monitor"))
    monitor.send(CONTROL, "set_window", ahead)
    monitor.flush()
    monitor.close()
    operator = Producer(run.stack.bootstrap, "operator")  # as `admin`
    operator.send(CONTROL, "set_window", control_command("window", "the operator's, later", max_new_tokens=5))
    operator.flush()
    operator.close()
    run.proc("rollout").stop()  # what the running replica made of the two commands is not the question
    since = run.proc("rollout").log_path.stat().st_size
    rollout = run.stack.restart("rollout", wait=False)
    wait_for(lambda: len(windows_set(rollout, since)) >= 2, 90, "the restarted rollout applying both commands",
             detail=lambda: rollout.tail(5))
    assert windows_set(rollout, since) == ["6", "5"]  # the broker's order: the operator's, written last, holds


def set_policy_config(bootstrap: str, **config: str) -> None:
    """The topic's whole configuration (AlterConfigs replaces it: what is not named reverts)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **security.kafka_python())
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, POLICY.name, configs=config)])
    finally:
        admin.close()


def test_compaction_leaves_a_restarted_replica_the_newest_admitted_announcement(run: Run) -> None:
    """Finding 4: the forger overwrites the key of the newest genuine record, and the broker
    compacts `policy`. Under one key for the whole topic that left only forged records; under one
    key per (version, weights) the older genuine ones survive, and a restarted replica loads the
    newest of them that loads (v2's survivor has a wrong SHA-256, so v1)."""
    genuine = {(r["value"]["version"], r["value"].get("sha256")): (r["key"], r["offset"])
               for r in read_range(run.stack.bootstrap, POLICY.name) if r["value"].get("signature")}
    newest_key, newest_offset = genuine[("2", run.sha0)]  # int64 fields are strings in protobuf's JSON
    set_policy_config(run.stack.bootstrap, **{"cleanup.policy": "compact", "segment.ms": "100",
                                              "min.cleanable.dirty.ratio": "0.01"})
    forged = run.record(3, run.policy0, run.sha0)
    run.publish(forged, key=newest_key.encode())
    time.sleep(0.5)
    run.publish(run.record(4, run.policy0, run.sha0), key=b"roll")  # rolls the segment holding the forgery

    def offsets() -> list[int]:
        return [r["offset"] for r in read_range(run.stack.bootstrap, POLICY.name)]

    wait_for(lambda: newest_offset not in offsets(), 90, "the log cleaner compacting `policy`", interval=2.0)
    survivors = {(r["value"]["version"], r["value"].get("sha256")) for r in read_range(run.stack.bootstrap, POLICY.name)
                 if r["value"].get("signature")}
    assert ("1", run.sha0) in survivors  # the older genuine announcement was not compacted away
    rollout = run.stack.restart("rollout", wait=False)
    wait_for(lambda: "loaded policy version 1 " in rollout.tail(400), 90,
             "the restarted rollout loading the newest genuine announcement left", detail=lambda: rollout.tail(5))
    rollout.wait_ready(60)
    assert refused(rollout, "unsigned") >= 2  # the forgeries it read on the way, counted
