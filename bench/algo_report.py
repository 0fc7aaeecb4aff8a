"""The algorithm benchmark's tables: one line per run, the calibration sweep, the per-seed headline."""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from algo_run import RunResult


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%" if x == x else "-"


def drift(r: RunResult) -> str:
    """The drift figures of a run, per step averaged (max over steps in brackets)."""
    text = (f"masked {_pct(r.mean('masked_frac'))} [{_pct(r.max('masked_frac'))}]  "
            f"|log r| last mb {r.mean('drift_abs_log_ratio_last'):.4f} [{r.max('drift_abs_log_ratio_last'):.4f}]  "
            f"A>0 & r>1+eps_hi {_pct(r.mean('pos_clip_high_share'))}")
    if any("fork_tokens" in s for s in r.steps):
        forks = sum(s.get("fork_tokens", 0.0) for s in r.steps)
        above = sum(s.get("fork_above_dapo", 0.0) * s.get("fork_tokens", 0.0) for s in r.steps)
        ratio = sum(s.get("fork_ratio_mean", 0.0) * s.get("fork_tokens", 0.0) for s in r.steps) / max(forks, 1)
        text += (f"  re-check tokens of A>0 samples: {forks:.0f}, ratio after the batch {ratio:.2f} (mean), "
                 f"{_pct(above / max(forks, 1))} above 1.28")
    return text


def run_line(r: RunResult) -> str:
    curve = " ".join(f"{e.step}:{e.pool:.2f}/{e.held_out:.2f}" + (f"/{e.recheck_share:.2f}" if e.recheck_share else "")
                     for e in r.evals)
    sampled = r.mean("groups_sampled")
    loss = r.config.algorithm(r.algo).loss()
    return (f"seed {r.seed} {r.algo:5s} eps {loss.eps_low:g}/{loss.eps_high:g} "
            f"lr {r.config.lr:g} | step:pool/held-out[/re-check share] {curve} | {drift(r)} | "
            f"groups sampled per step {sampled:.1f}{_starved(r)} ({r.seconds:.0f}s)")


def _starved(r: RunResult) -> str:
    if r.starved_at is None:
        return ""
    return (f"; ended at step {r.starved_at}: fewer than {r.config.batch_groups} trainable groups among "
            f"{r.config.max_groups_per_step} sampled")


def calibration_table(results: Sequence[RunResult], knob: str, limits: dict[str, float]) -> str:
    rows = [f"\n{knob:>9} | final pool | final held-out | masked (mean, max) | |log r| last mb (mean, max) | "
            f"A>0 & r>1+eps_hi | within {limits}"]
    for r in results:
        value = getattr(r.config, knob)
        ok = all(r.mean(k) <= v for k, v in limits.items())
        rows.append(f"{value!s:>9} | {r.evals[-1].pool:10.3f} | {r.evals[-1].held_out:14.3f} | "
                    f"{_pct(r.mean('masked_frac')):>8}, {_pct(r.max('masked_frac')):>7} | "
                    f"{r.mean('drift_abs_log_ratio_last'):.4f}, {r.max('drift_abs_log_ratio_last'):.4f}{'':>11} | "
                    f"{_pct(r.mean('pos_clip_high_share')):>16} | {'yes' if ok else 'no'}")
    return "\n".join(rows)


def _mean_sd(xs: Sequence[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.mean(xs):+.3f} +- {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:+.3f}"


def _nanmean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


def warm_start_line(results: Sequence[RunResult]) -> str:
    """What the warm start does (the step-0 evaluations of every run): is the re-check rare and worth taking?"""
    first = [r.evals[0] for r in results]
    text = f"warm start, sampled on the pool: accuracy {_nanmean([e.pool for e in first]):.3f}"
    if any(e.recheck_share for e in first):
        text += (f"; re-check taken by {_pct(_nanmean([e.recheck_share for e in first]))} of samples, right "
                 f"{_nanmean([e.recheck_acc for e in first]):.3f} of the time when taken, "
                 f"{_nanmean([e.plain_acc for e in first]):.3f} when not")
    return text


def _steps(n: int | None) -> str:
    return "-" if n is None else str(n)


def headline(results: Sequence[RunResult], reference: str) -> str:
    """Per seed: the steps the reference needs to reach its own final pool accuracy and the steps each other
    algorithm needs to reach it (the report's "same accuracy in half the steps" is other/reference <= 0.5)."""
    by = {(r.algo, r.seed): r for r in results}
    seeds = sorted({r.seed for r in results})
    others = sorted({r.algo for r in results} - {reference})
    out = ["\n" + warm_start_line(results)]
    for algo in others:
        rows, step_diffs, acc_diffs, halves, reached = [], [], [], 0, 0
        for seed in seeds:
            ref, alt = by.get((reference, seed)), by.get((algo, seed))
            if ref is None or alt is None:
                continue
            total = ref.config.steps
            target = ref.evals[-1].pool
            ref_steps, alt_steps = ref.steps_to(target), alt.steps_to(target)
            acc_diffs.append(alt.evals[-1].pool - target)
            if alt_steps is not None:
                reached += 1
                step_diffs.append(ref_steps - alt_steps)
                halves += alt_steps <= ref_steps / 2
            ratio = f"{alt_steps / ref_steps:.2f}" if alt_steps is not None and ref_steps else "-"
            rows.append(f"{seed:4d} | {ref.evals[0].pool:6.3f} | {target:9.3f} | {alt.evals[-1].pool:9.3f} | "
                        f"{_steps(ref_steps):>12} | {alt_steps if alt_steps is not None else f'>{total}':>12} | "
                        f"{ratio:>5} | {ref.evals[-1].held_out:.3f} / {alt.evals[-1].held_out:.3f} | "
                        f"{ref.evals[-1].recheck_share:.3f} / {alt.evals[-1].recheck_share:.3f}")
        if not rows:
            continue
        total = results[0].config.steps
        out.append(f"\n{algo} against {reference}: pool accuracy (sampled), S = {total} steps, evaluated every "
                   f"{results[0].config.eval_every}; target = {reference}'s accuracy at step S")
        out.append(f"seed | {reference}@0 | {reference}@S | {algo}@S | {reference} steps to target | "
                   f"{algo} steps to it | ratio | held-out @S | re-check share @S")
        out.extend(rows)
        out.append(f"paired: {reference}'s steps - {algo}'s steps to the target {_mean_sd(step_diffs)} over the "
                   f"{reached} of {len(rows)} seeds where {algo} reached it; {algo} needed at most half of "
                   f"{reference}'s steps on {halves} of {len(rows)} seeds; {algo}@S - {reference}@S "
                   f"{_mean_sd(acc_diffs)}")
    out.append("\ndrift per run (per step mean [max]):")
    out.extend(f"seed {r.seed} {r.algo:5s} {drift(r)}" for r in sorted(results, key=lambda r: (r.seed, r.algo)))
    return "\n".join(out)
