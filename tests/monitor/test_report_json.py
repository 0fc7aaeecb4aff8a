"""`m1flow report --json` keeps every field, those whose value is 0 included (issue 38): a reader
must tell "accuracy 0" from "no accuracy field"."""
from __future__ import annotations

import json

from m1flow.contracts import rpc
from ops.control_cli import report_json


def test_report_json_keeps_zero_values():
    rep = rpc.MonitorReport(window=0, stage=0)
    rep.rows.add(policy_version=0, groups=3, samples=24, mean_reward=0.0, accuracy=0.0, mean_length=12.5)
    data = json.loads(report_json(rep))
    assert data["window"] == 0 and data["stage"] == 0 and data["alert_log"] == [] and data["signals"] == {}
    assert data["rows"] == [{"policy_version": "0", "groups": 3, "samples": 24, "mean_reward": 0.0, "accuracy": 0.0,
                             "mean_length": 12.5}]
