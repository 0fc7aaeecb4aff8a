"""`m1flow up` under random faults over several cycles (kill -9 and SIGTERM of every service, the
broker frozen or killed, garbage and a truncated message on `rollouts` and `scored`), then the
guarantees checked from the topics and the learner's checkpoints; prints the timeline with the
recovery time of each fault and the invariants."""
from __future__ import annotations

from ops.chaos.run import ChaosConfig, ChaosRun


def test_chaos_run_keeps_every_guarantee(tmp_path):
    report = ChaosRun(ChaosConfig(run_dir=tmp_path / "chaos", seed=11, cycles=2, prompts=600)).run()
    assert report.ok, report.table()
    assert report.numbers["newest_version"] >= 10


def test_chaos_run_keeps_every_guarantee_in_secure_mode(tmp_path):
    """The same faults on `m1flow up --secure`: a restarted broker serves TLS again, a restarted
    service comes back with its own certificate, and no fault opens a way around the ACLs."""
    report = ChaosRun(ChaosConfig(run_dir=tmp_path / "chaos", seed=5, cycles=1, prompts=300, secure=True)).run()
    assert report.ok, report.table()
    assert report.numbers["newest_version"] >= 5
