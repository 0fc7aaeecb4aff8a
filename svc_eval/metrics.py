"""svc_eval on /metrics: results per set, the newest pass@1, what was skipped and why, the queue."""
from __future__ import annotations

from prometheus_client import Counter, Gauge

RESULTS = Counter("m1flow_eval_results_total", "EvalResults published", ["set"])
SKIPPED = Counter("m1flow_eval_skipped_total", "versions (or sets of a version) not evaluated, by reason: missing, "
                  "checksum, unreadable (its checkpoint), refused (the announcement), unknown_version, unknown_set",
                  ["reason"])
PASS1 = Gauge("m1flow_eval_pass1", "held-out pass@1 of the newest version evaluated", ["set"])
SET_SECONDS = Gauge("m1flow_eval_set_seconds", "sampling and scoring time of the newest result", ["set"])
VERSION = Gauge("m1flow_eval_version", "the newest policy version evaluated")
QUEUED = Gauge("m1flow_eval_queued_versions", "versions waiting to be evaluated")
