"""Offline difficulty filtering: `m1flow data profile` (pass rates from the real services) and
`m1flow data filter` (bands). Band logic, outcomes and the filter's writers as unit tests; over a
real broker, a profile killed with SIGKILL mid-way, resumed, checked against `scored`, then filtered."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from m1flow.contracts import events
from m1flow.data import DatasetConfig, open_table
from m1flow.data.readers import read_all
from m1flow.data.writers import sibling_path
from ops.bands import (DEFAULT_BAND, KEPT, TOO_EASY, TOO_HARD, UNPROFILED, Band, BandError, Bands,
                              filter_file, parse_band)
from ops.profile import ProfileError, ProfileFile, check_policy, outcome_of, read_profile
from m1flow.status import Status

pytestmark = pytest.mark.slow  # brokers and services as processes: not the unit tier (make test-fast)

ROOT = Path(__file__).resolve().parents[2]


# ---- bands --------------------------------------------------------------------------------------
def test_the_default_band_is_the_reports_open_interval():
    assert DEFAULT_BAND == Band(0.0, 0.9)
    assert [DEFAULT_BAND.place(r) for r in (0.0, 0.1, 0.5, 0.89, 0.9, 1.0)] == \
        [TOO_HARD, KEPT, KEPT, KEPT, TOO_EASY, TOO_EASY]


@pytest.mark.parametrize("text,kind,band", [
    ("0,0.9", "", Band(0.0, 0.9)),
    ("[0.1, 0.8]", "", Band(0.1, 0.8, True, True)),
    ("logic=(0,1]", "logic", Band(0.0, 1.0, False, True)),
    ("logic:sudoku=[0.2,0.6)", "logic:sudoku", Band(0.2, 0.6, True, False)),
    ("math=[0.5,0.5]", "math", Band(0.5, 0.5, True, True)),
])
def test_bands_parse(text, kind, band):
    assert parse_band(text) == (kind, band)


@pytest.mark.parametrize("text,says", [
    ("0.9,0.1", "empty"), ("0.5,0.5", "empty"), ("-0.1,0.5", "outside"), ("[0,0.9", "both ends"),
    ("a,b", "numbers"), ("0.5", "LO,HI"), ("logic=", "LO,HI"),
])
def test_bad_bands_are_named(text, says):
    with pytest.raises(BandError, match=says) as info:
        parse_band(text)
    assert repr(text) in str(info.value)


def test_closed_ends_keep_their_edges_and_kinds_find_their_band():
    bands = Bands.parse(["[0,0.5]", "logic=0.1,0.8", "logic:sudoku=[0.3,1]"])
    assert bands.for_kind("arith") == Band(0.0, 0.5, True, True)
    assert bands.for_kind("logic:zebra") == Band(0.1, 0.8)  # the family's
    assert bands.for_kind("logic:sudoku") == Band(0.3, 1.0, True, True)  # its own wins
    assert [bands.for_kind("arith").place(r) for r in (0.0, 0.5, 0.75)] == [KEPT, KEPT, TOO_EASY]
    assert [bands.for_kind("logic:sudoku").place(r) for r in (0.2, 0.3, 1.0)] == [TOO_HARD, KEPT, KEPT]
    assert Bands.parse([]).describe() == "default (0, 0.9)"


# ---- one row's outcome --------------------------------------------------------------------------
def group(*samples: dict, size: int | None = None, incomplete: bool = False) -> events.ScoredGroup:
    g = events.ScoredGroup(group_id="p/1/abcd", group_size=size or len(samples), incomplete=incomplete)
    for i, s in enumerate(samples):
        g.samples.add(index=i, reward=s.get("reward", 0.0), status=s.get("status", Status.OK),
                      parts=events.RewardParts(correctness=s.get("c", s.get("reward", 0.0))),
                      **({"correct": s["correct"]} if "correct" in s else {}))
    return g


def test_binary_outcomes_count_verdicts_and_leave_out_infrastructure_failures():
    out = outcome_of(group({"reward": 1.0, "correct": True}, {"correct": False},
                           {"correct": False, "status": Status.FORMAT_ERROR},  # the policy's fault: a fail
                           {"status": Status.VERIFIER_TIMEOUT}))  # ours: not counted
    assert out == {"k": 4, "judged": 3, "verdicts": 3, "passes": 1, "pass_rate": 0.333333, "reward_mean": 0.333333,
                   "infra_failures": 1, "incomplete": False}


def test_partial_credit_rows_carry_the_mean_and_variance_of_correctness():
    out = outcome_of(group({"reward": 1.0, "correct": True}, {"reward": 0.5, "correct": False},
                           {"reward": 0.0, "correct": False}, {"reward": 0.5, "correct": False}))
    assert (out["passes"], out["pass_rate"]) == (1, 0.25)  # the verdict: reward == 1
    assert (out["correctness_mean"], out["correctness_var"]) == (0.5, 0.125)


def test_a_group_without_verdicts_has_no_pass_rate():
    out = outcome_of(group({"status": Status.JUDGE_ERROR}, {"status": Status.JUDGE_ERROR}, size=4, incomplete=True))
    assert (out["k"], out["judged"], out["pass_rate"], out["reward_mean"]) == (4, 0, None, None)
    assert out["incomplete"]


# ---- the profile file ---------------------------------------------------------------------------
def test_a_torn_last_line_is_cut_and_a_profile_of_other_arguments_refused(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"run": "r1", "row": 0, "pass_rate": 0.5}\n{"run": "r1", "row": 1, "pass_ra')
    profile = ProfileFile(path, "r1")
    assert profile.done == {0}
    profile.write({"row": 1, "pass_rate": 0.0})
    profile.close()
    assert sorted(read_profile(path)) == [0, 1] and path.read_text().count("\n") == 2
    with pytest.raises(ProfileError, match="not of these arguments"):
        ProfileFile(path, "r2")


def test_the_policy_is_checked_before_anything_starts(tmp_path, hybrid_policy):
    assert check_policy(hybrid_policy, "auto") == ("native", 0)
    with pytest.raises(ProfileError, match="not a model directory"):
        check_policy(tmp_path, "auto")
    with pytest.raises(ProfileError, match="use native or vllm"):
        check_policy(hybrid_policy, "hf")
    with pytest.raises(ProfileError, match="unknown rollout engine"):
        check_policy(hybrid_policy, "sglang")


# ---- the filter ---------------------------------------------------------------------------------
def rows(n: int = 5) -> list[dict]:
    return [{"id": f"q{i}", "source": "mix" if i % 2 else "arith", "prompt": f"{i}+1=",
             "verifier": {"kind": "arith", "gold": str(i + 1)}} for i in range(n)]


def profile_of(path: Path, rates: dict[int, float | None], ids: dict[int, str] | None = None) -> Path:
    with open(path, "w") as fh:
        for row, rate in rates.items():
            fh.write(json.dumps({"run": "r", "row": row, "id": (ids or {}).get(row, f"q{row}"), "kind": "arith",
                                 "pass_rate": rate}) + "\n")
    return path


def write_as(fmt: str, path: Path, data: list[dict]) -> Path:
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
    elif fmt == "csv":
        import csv

        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "source", "prompt", "verifier.kind", "verifier.gold"])
            for r in data:
                w.writerow([r["id"], r["source"], r["prompt"], r["verifier"]["kind"], r["verifier"]["gold"]])
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(data), path)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_filter_keeps_the_band_in_the_inputs_format_and_counts_per_source(tmp_path, fmt):
    data = write_as(fmt, tmp_path / f"data.{fmt}", rows())
    profile = profile_of(tmp_path / "p.jsonl", {0: 0.0, 1: 0.5, 2: 0.9, 3: 0.25})  # row 4 unprofiled
    result = filter_file(DatasetConfig(path=str(data)), profile, Bands())
    assert result.out == tmp_path / f"data.filtered.{fmt}"
    original = dict(read_all(open_table(data)))
    assert [r for _, r in read_all(open_table(result.out))] == [original[1], original[3]]
    assert {s: dict(c) for s, c in result.by_source.items()} == {
        "arith": {TOO_HARD: 1, TOO_EASY: 1, UNPROFILED: 1}, "mix": {KEPT: 2}}
    assert "total" in result.table().splitlines()[-1]


def test_filter_can_keep_unprofiled_rows_and_refuses_a_profile_of_another_file(tmp_path):
    data = write_as("jsonl", tmp_path / "data.jsonl", rows())
    kept = filter_file(DatasetConfig(path=str(data)), profile_of(tmp_path / "p.jsonl", {0: 0.5, 1: None}),
                       Bands(), tmp_path / "k.jsonl", keep_unprofiled=True)
    assert [r["id"] for _, r in read_all(open_table(kept.out))] == ["q0", "q1", "q2", "q3", "q4"]
    with pytest.raises(ProfileError, match="another file"):
        filter_file(DatasetConfig(path=str(data)), profile_of(tmp_path / "x.jsonl", {2: 0.5}, {2: "other"}),
                    Bands(), tmp_path / "x-out.jsonl")
    assert not (tmp_path / "x-out.jsonl").exists()  # nothing half-written


def test_sibling_names():
    assert sibling_path(Path("d/a.jsonl.gz"), "filtered") == Path("d/a.filtered.jsonl.gz")
    assert sibling_path(Path("d/train.parquet"), "filtered") == Path("d/train.filtered.parquet")
    assert sibling_path(Path("d/x.arrow"), "filtered") == Path("d/x.arrow.filtered.jsonl")


# ---- over the real broker -----------------------------------------------------------------------
# The warm-start policy answers these right about a third of the time (32 samples each, measured);
# the impossible rows' golds are numbers it never writes in 8 tokens.
EASY = [("6+0=", "6"), ("8-3=", "5"), ("0+6=", "6"), ("8+9=", "17"), ("4-3=", "1")]
IMPOSSIBLE = [("5+5=", "98765"), ("7-2=", "-4321")]


def dataset(path: Path) -> Path:
    lines = [{"id": f"easy{i}", "source": "arith", "prompt": q, "verifier": {"kind": "arith", "gold": a}}
             for i, (q, a) in enumerate(EASY)]
    lines += [{"id": f"hard{i}", "source": "arith", "prompt": q, "verifier": {"kind": "arith", "gold": a}}
              for i, (q, a) in enumerate(IMPOSSIBLE)]
    lines.insert(2, {"id": "nogold", "source": "arith", "prompt": "1+1=", "verifier": {"kind": "arith"}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "ops", "data", *map(str, args)]


def leftovers(run_dir: Path) -> list[str]:
    """Processes of the profile's stack still running: its services and its broker name the run dir."""
    found = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True)
    return found.stdout.split()


def broker_alive(run_dir: Path) -> bool:
    state = run_dir / "kafka" / "broker.json"
    return state.exists() and psutil.pid_exists(json.loads(state.read_text())["pid"]) and \
        psutil.Process(json.loads(state.read_text())["pid"]).status() != psutil.STATUS_ZOMBIE


def wait_gone(run_dir: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (leftovers(run_dir) or broker_alive(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftovers(run_dir) and not broker_alive(run_dir), "the profile's stack outlived it"


def good_lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if '"passes"' in line) if path.exists() else 0


def topics(run_dir: Path) -> dict[str, list[dict]]:
    """prompts, rollouts and scored of the profile's own broker (started again to read them)."""
    from ops.kafka import Broker
    from ops.topics_io import read_range

    broker = Broker(run_dir / "kafka")
    try:
        bootstrap = broker.start()
        return {t: [e for e in read_range(bootstrap, t) if "value" in e] for t in ("prompts", "rollouts", "scored")}
    finally:
        broker.stop()


def test_profile_killed_resumes_matches_scored_and_filters(tmp_path, hybrid_policy):
    data, out, run_dir = dataset(tmp_path / "rows.jsonl"), tmp_path / "rows.profile.jsonl", tmp_path / "run"
    args = cli("profile", data, "--model", hybrid_policy, "--k", "4", "--run-dir", run_dir, "--lead", "1")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before, killed_ms = killed_after_two_rows(args, env, tmp_path, out, run_dir)

    again = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    final = out.read_text().splitlines()
    assert final[:len(before)] == [line for line in before if line.endswith("}")]  # written rows kept as they were
    lines = read_profile(out)
    assert sorted(lines) == list(range(8))
    assert "nogold" not in {v["id"] for v in lines.values()} and "verifier.gold" in lines[2]["error"]

    seen = topics(run_dir)
    prompts = each_row_published_once(seen)
    lines_match_the_scored_groups(lines, prompts, seen)
    written_first = {json.loads(line)["row"] for line in before if line.endswith("}")}
    later = {e["value"]["group_id"].rsplit("/", 1)[0] for e in seen["rollouts"]
             if int(e["value"]["header"]["created_unix_ms"]) > killed_ms}
    # A written row may be rolled out again after the kill: the rollout commits a prompt after its group is
    # out, and under load a kill right after the second line can come before that commit lands, so the
    # resumed run re-reads it (at-least-once; the clean-clone suite saw it once). It is never written twice.
    replayed = later & {prompts[r][0]["prompt_id"] for r in written_first if r != 2}
    assert sorted(json.loads(line)["row"] for line in final if line.endswith("}")) == list(range(8)), "a row written twice"
    in_flight = {r for r, p in prompts.items() if int(p[0]["header"]["created_unix_ms"]) < killed_ms} - written_first
    print(f"killed with {len(written_first)} rows written ({sorted(replayed)} rolled out again) and rows "
          f"{sorted(in_flight)} in flight")
    if in_flight:  # published before the kill, not written: awaited, not published again
        assert f"{len(in_flight)} published earlier" in again.stdout

    assert [lines[r]["pass_rate"] for r in (6, 7)] == [0.0, 0.0]  # the impossible rows
    assert sum(lines[r]["passes"] for r in (0, 1, 3, 4, 5)) > 0
    the_filter_keeps_the_band(data, out, lines, tmp_path, env)


def killed_after_two_rows(args: list[str], env: dict[str, str], cwd: Path, out: Path, run_dir: Path
                          ) -> tuple[list[str], int]:
    """A profile SIGKILLed as soon as two rows are written (with a lead of one the next row's prompt is
    usually out by then: a row in flight): the lines it wrote, and when it was killed; its stack dies
    with it. Killed at once, not a moment later: since svc_reward emits a group as it is scored, the
    remaining rows took under 0.3 s, and a kill 0.3 s late found the run done (7 of 7 rows)."""
    first = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    while good_lines(out) < 2 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    killed_ms = int(time.time() * 1000)
    first.wait(10)
    before = out.read_text().splitlines()
    assert 2 <= good_lines(out) < 7, first.stdout.read()
    wait_gone(run_dir)
    return before, killed_ms


def each_row_published_once(seen: dict[str, list[dict]]) -> dict[int, list[dict]]:
    """The prompts by row: every row but the bad one, once, stamped by the profile's run."""
    prompts: dict[int, list[dict]] = {}
    for entry in seen["prompts"]:
        value = entry["value"]
        prompts.setdefault(int(value.get("origin", {}).get("position", 0)), []).append(value)
    assert sorted(prompts) == [r for r in range(8) if r != 2]
    assert all(len(p) == 1 for p in prompts.values()), "a row was published twice"
    run_id = prompts[0][0]["header"]["trace"]["run_id"]
    assert run_id.startswith("profile-") and all(p[0]["header"]["producer"] == "profile" for p in prompts.values())
    return prompts


def lines_match_the_scored_groups(lines: dict[int, dict], prompts: dict[int, list[dict]],
                                  seen: dict[str, list[dict]]) -> None:
    """Each row's line counts the passes of one of its scored groups, of the profile's run."""
    run_id = prompts[0][0]["header"]["trace"]["run_id"]
    by_group: dict[str, list[dict]] = {}
    for entry in seen["scored"]:
        by_group.setdefault(entry["value"]["group_id"], []).append(entry["value"])
    for row, line in lines.items():
        if row == 2:
            continue
        prompt = prompts[row][0]
        groups = by_group[f"{prompt['prompt_id']}/{prompt['header']['message_id'][:8]}"]
        assert all(g["header"]["trace"]["run_id"] == run_id for g in groups)
        outcomes = [sum(bool(s.get("correct")) for s in g["samples"]) for g in groups]
        assert line["passes"] in outcomes and line["k"] == 4 and line["judged"] == 4
        assert line["pass_rate"] == line["passes"] / 4 and line["run"] == run_id


def the_filter_keeps_the_band(data: Path, out: Path, lines: dict[int, dict], cwd: Path, env: dict[str, str]) -> None:
    filtered = subprocess.run(cli("filter", data, "--profile", out), cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120)
    assert filtered.returncode == 0, filtered.stderr
    rates = {r: v.get("pass_rate") for r, v in lines.items()}
    kept = [r for r, rate in rates.items() if rate is not None and 0 < rate < 0.9]
    got = [row for _, row in read_all(open_table(cwd / "rows.filtered.jsonl"))]
    assert [row["id"] for row in got] == [lines[r]["id"] for r in sorted(kept)]
    total = filtered.stdout.splitlines()[-2].split()
    assert total[0] == "total" and [int(x) for x in total[1:]] == [
        len(kept), sum(1 for r in rates.values() if r is not None and r >= 0.9),
        sum(1 for r in rates.values() if r == 0.0), 1]


def test_a_profile_that_fails_to_start_leaves_nothing_running(tmp_path, hybrid_policy):
    data, run_dir = dataset(tmp_path / "rows.jsonl"), tmp_path / "run"
    bad = tmp_path / "reward.yaml"
    bad.write_text("group_timeout_s: soon\n")
    proc = subprocess.run(cli("profile", data, "--model", hybrid_policy, "--k", "2", "--run-dir", run_dir,
                              "--reward-config", bad),
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "did not start" in proc.stderr and "group_timeout_s" in proc.stderr
    wait_gone(run_dir, timeout=5)
