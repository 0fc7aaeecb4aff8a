"""The source on /metrics: what it published, where it stands in each source, its lead, bad rows."""
from __future__ import annotations

from prometheus_client import Counter, Gauge

PUBLISHED = Counter("m1flow_source_prompts_total", "prompts published", ["source"])
BAD_ROWS = Counter("m1flow_source_bad_rows_total", "rows skipped and dead-lettered", ["source", "reason"])
EPOCH = Gauge("m1flow_source_epoch", "the epoch each source is in", ["source"])
POSITION = Gauge("m1flow_source_position", "the next row's index in the epoch's order", ["source"])
DRAWS = Gauge("m1flow_source_draws", "prompts drawn from the mixture so far (bad rows included)")
OUTSTANDING = Gauge("m1flow_source_outstanding", "prompts published and not committed by the rollout group")
LEAD_LIMIT = Gauge("m1flow_source_lead_limit", "prompts allowed outstanding (lead_steps x batch_groups; -1: none)")
MIXTURE_VERSION = Gauge("m1flow_source_mixture_version", "the mixture version in force (0: the config's)")
WEIGHT = Gauge("m1flow_source_weight", "each source's weight in the mixture in force", ["source"])
LEVEL = Gauge("m1flow_source_level", "each generator's difficulty level in force (0: its default)", ["source"])
MIXTURE_REFUSED = Counter("m1flow_source_mixture_refused_total", "SetMixture commands refused", ["reason"])
RETIRED = Gauge("m1flow_source_retired_rows", "rows the online filter retired", ["source", "kind"])
RETIRED_SKIPS = Counter("m1flow_source_retired_skips_total", "draws that passed a retired row", ["source"])
JUDGED = Counter("m1flow_source_groups_judged_total", "scored groups the online filter judged", ["source", "verdict"])
HELDOUT_DROPPED = Counter("m1flow_source_heldout_dropped_total",
                          "draws not published: their prompt is a row of an eval set (held out)", ["source"])
HELDOUT_PROMPTS = Gauge("m1flow_source_heldout_prompts", "distinct prompts of the eval sets kept out of training")
