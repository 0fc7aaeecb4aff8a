"""Events in, rows out: the one place that knows the shape of the messages the monitor reads.

ScoredGroup schema 2: `status` is the `Status` enum, advantages and dynamic-sampling drops are the
learner's; schema-1 records carry the string in `legacy_status`. Only `scored_group_rows` and
`infra_failed` read it.
"""
from __future__ import annotations

from collections import Counter

from m1flow.accounting import scored_kind, source_of
from m1flow.contracts import events
from m1flow.group_totals import GroupTotals
from m1flow.status import status_of
from svc_monitor.schema import (DeadLetterRow, DecisionRow, EvalRow, GenRMSampleRow, GroupRow, MetricRow,
                                PolicyRow, RolloutRow)
from svc_monitor.store import ScoredGroupRows

def infra_failed(sample: events.ScoredSample) -> bool:
    """Our infrastructure failed on this sample (its score says nothing about the policy).

    Reads both contracts: the `Status` enum of schema 2 and the strings of schema 1."""
    return status_of(sample).is_infra_failure


def token_repetition(tokens: list[int], n: int) -> float:
    """Share of a response's n-grams that repeat an earlier one (0 for a response shorter than n+1)."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if len(grams) < 2:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def scored_group_rows(group: events.ScoredGroup, ts_ms: int) -> ScoredGroupRows:
    """The group's totals, and a GenRM row per sample that a GenRM judge scored.

    A sample counts as GenRM-scored when its reward has a GenRM part; a group whose GenRM parts are
    all zero (every answer tied) carries no length signal either way.
    """
    totals = GroupTotals.of([group])
    versions = [s.policy_version for s in group.samples] or [group.header.trace.policy_version]
    row = GroupRow(group_id=group.group_id, policy_version=min(versions), samples=totals.samples,
                   reward_sum=totals.reward_sum, correct=totals.correct, judged=totals.judged,
                   length_sum=totals.length_sum, dropped=0, kind=scored_kind(group), source=source_of(group),
                   domain=group.domain, ts_ms=ts_ms,
                   reasons=dict(Counter(s.reason for s in group.samples if s.reason)) or None)
    ok = [s for s in group.samples if not infra_failed(s)]
    genrm = []
    if any(s.parts.genrm != 0 for s in ok):
        genrm = [GenRMSampleRow(group_id=group.group_id, policy_version=s.policy_version, score=s.parts.genrm,
                                length=len(s.token_ids), correct=s.correct if s.HasField("correct") else None,
                                ts_ms=ts_ms) for s in ok]
    return ScoredGroupRows(row, genrm)


def rollout_row(rollout: events.Rollout, ts_ms: int, ngram: int) -> RolloutRow:
    tokens = list(rollout.token_ids)
    return RolloutRow(rollout_id=rollout.rollout_id, group_id=rollout.group_id,
                      policy_version=rollout.policy_version, length=len(tokens), window=rollout.max_new_tokens,
                      finish=int(rollout.finish_reason), nll_sum=-float(sum(rollout.logprobs)),
                      repetition=token_repetition(tokens, ngram), kind=rollout.verifier.kind, ts_ms=ts_ms)


def metric_row(metric: events.Metric, ts_ms: int) -> MetricRow:
    return MetricRow(service=metric.service, name=metric.name, step=metric.step, value=metric.value,
                     labels=dict(metric.labels) or None, ts_ms=ts_ms)


def dead_letter_row(letter: events.DeadLetter, ts_ms: int) -> DeadLetterRow:
    return DeadLetterRow(ts_ms=ts_ms, consumer_group=letter.consumer_group, source_topic=letter.source_topic,
                         service=letter.service, error=letter.error[:500])


def policy_row(policy: events.PolicyVersion, ts_ms: int) -> PolicyRow:
    return PolicyRow(version=policy.version, ts_ms=ts_ms)


def command_of(control: events.Control) -> str:
    return control.WhichOneof("command") or ""


def evidence_dict(evidence: events.Evidence) -> dict:
    """Plain JSON (numbers stay numbers; protobuf's JSON mapping would quote the int64 versions)."""
    return {"rule": evidence.rule, "signals": dict(evidence.signals), "thresholds": dict(evidence.thresholds),
            "version_from": evidence.version_from, "version_to": evidence.version_to,
            "windows": evidence.windows, "decided_by": evidence.decided_by}


def decision_row(control: events.Control, version: int) -> DecisionRow:
    reason = control.reason or (control.recalibrate.reason if control.HasField("recalibrate") else "")
    mixture = control.set_mixture if control.HasField("set_mixture") else None
    weights = dict(mixture.weights) if mixture else None
    if control.HasField("set_correction"):  # its one number in the weights column: {"scale": s}
        weights = {"scale": control.set_correction.scale}
    return DecisionRow(message_id=control.header.message_id, ts_ms=control.header.created_unix_ms,
                       command=command_of(control), max_new_tokens=control.set_window.max_new_tokens,
                       reason=reason, evidence=evidence_dict(control.evidence), version=version,
                       weights=weights,
                       levels=dict(mixture.levels) if mixture else None, stage=mixture.stage if mixture else "")


def eval_row(result: events.EvalResult, ts_ms: int) -> EvalRow:
    """svc_eval's result for one (run, set, version); pass@k keyed by k as a string (JSON)."""
    return EvalRow(run_id=result.run_id, set_name=result.set, policy_version=result.policy_version,
                   prompts=result.prompts, samples=result.samples, judged=result.judged, correct=result.correct,
                   pass1=result.pass1, pass1_low=result.pass1_low, pass1_high=result.pass1_high,
                   pass_at_k={str(k): v for k, v in sorted(result.pass_at_k.items())},
                   mean_length=result.mean_length, mean_reward=result.mean_reward, duration_s=result.duration_s,
                   message_id=result.header.message_id, ts_ms=ts_ms)
