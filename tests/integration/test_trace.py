"""`m1flow trace`, `m1flow replay --compare` and the monitor's per-group page over a real broker, a
real reward service, a real learner and a real monitor (one stack for the module).

The test writes the rollouts of three prompts itself, what svc_rollout would write for them but
with answers chosen so that every verdict is known: one group half right (trained), one all right
(all rewards equal: skipped), one with a single right answer (trained with the first). The trace of
each must find every record where it lives and say what the learner did. A reward replay through a
copy of the code whose arith verifier also accepts an answer one above the gold must report exactly
the two samples that gives, and an unchanged replay nothing (exit 0).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from m1flow import checkpoint
from m1flow.bus import Producer, codec
from m1flow.bus.seek import partition_for
from m1flow.bus.topics import PROMPTS, ROLLOUTS
from m1flow.chat import prompt_ids
from m1flow.contracts import events
from m1flow.rl.selection import GROUP_SKIPPED, GROUP_TRAINED
from m1flow.trace.ids import group_id_for, rollout_id_for
from ops import ROOT
from ops.browser import browser_paths
from ops.cli import main
from ops.feed import arith_prompt
from ops.stack import Stack
from m1flow.tasks.arith import problems
from tests.integration.helpers import records, wait_for

GROUP = 4
# per prompt, what each sample answers: the gold plus this offset (None: no integer at all)
ANSWERS = {"trained": [0, 1, 5, 0], "skipped": [0, 0, 0, 0], "other": [1, None, 0, 7]}
OFF_BY_ONE = {("trained", 1), ("other", 0)}  # the samples a verifier accepting gold+1 flips
LEARNER = ["--batch-groups", "2", "--batch-timeout-s", "1.5"]


def rollouts_for(prompt: events.Prompt, offsets: list[int | None], tok) -> list[events.Rollout]:  # noqa: ANN001
    """The group's Rollouts as svc_rollout writes them (ids, trace, tokens of the response text)."""
    gid = group_id_for(prompt.prompt_id, prompt.header.message_id)
    context = prompt_ids(tok, prompt.text)
    out = []
    for i, offset in enumerate(offsets):
        text = "</think>\n" + ("no idea" if offset is None else str(int(prompt.verifier.gold) + offset))
        tokens = tok.encode(text, add_special_tokens=False)
        rid = rollout_id_for(gid, i)
        finish = events.FINISH_REASON_LENGTH if offset == 5 else events.FINISH_REASON_STOP
        out.append(events.Rollout(
            header=codec.header("rollout", run_id="local", group_id=gid, rollout_id=rid, message_id=f"{rid}@v0"),
            rollout_id=rid, group_id=gid, prompt_id=prompt.prompt_id, index=i, group_size=len(offsets),
            task_type="arith", prompt_text=prompt.text, prompt_token_ids=context, token_ids=tokens,
            logprobs=[-0.7] * len(tokens), response_text=text, finish_reason=finish, policy_version=0,
            verifier=prompt.verifier, max_new_tokens=16, engine="native", temperature=1.0, top_p=1.0))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The stack, the three prompts (name -> Prompt) and the time before their rollouts were written."""
    stack = Stack(tmp_path_factory.mktemp("trace"), service_args={"learner": LEARNER})
    try:
        stack.start(services=("reward", "learner", "monitor"))
        tok = checkpoint.load_tokenizer(stack.initial_policy())
        asked = dict(zip(ANSWERS, (arith_prompt(p, GROUP) for p in problems(seed=36, n=3, max_operand=20))))
        producer = Producer(stack.bootstrap, "test")
        for prompt in asked.values():
            producer.send(PROMPTS, prompt.prompt_id, prompt)
        producer.flush()
        started = int(time.time() * 1000) - 1000
        for name, prompt in asked.items():
            for rollout in rollouts_for(prompt, ANSWERS[name], tok):
                producer.send(ROLLOUTS, rollout.group_id, rollout)
        producer.close()
        groups = {group_id_for(p.prompt_id, p.header.message_id) for p in asked.values()}

        def decided() -> set[str]:
            return {r["value"]["labels"]["group"] for r in records(stack.bootstrap, "metrics")
                    if r["value"].get("name") in (GROUP_TRAINED, GROUP_SKIPPED)}
        wait_for(lambda: decided() >= groups, 180, "the learner to train two groups and skip one",
                 detail=lambda: (decided(), stack.get("learner").tail()))
        yield stack, asked, started
    finally:
        stack.stop()


def trace(bootstrap: str, capsys, *args: str) -> tuple[int, str]:  # noqa: ANN001
    capsys.readouterr()
    code = main(["--bootstrap", bootstrap, "trace", *args])
    return code, capsys.readouterr().out


def where(bootstrap: str, topic: str, key: str) -> list[str]:
    return [f"{topic}/{r['partition']}@{r['offset']}" for r in records(bootstrap, topic) if r["key"] == key]


def test_the_trace_of_a_trained_group_finds_every_record_and_the_step(run, capsys):
    stack, asked, _ = run
    prompt = asked["trained"]
    gid = group_id_for(prompt.prompt_id, prompt.header.message_id)
    code, out = trace(stack.bootstrap, capsys, gid, "--json")
    story = json.loads(out)
    assert code == 0 and story["reading"] == "group" and story["group_id"] == gid
    assert story["prompt"]["at"]["position"] == where(stack.bootstrap, "prompts", prompt.prompt_id)[0]
    assert story["prompt"]["at"]["partition"] == partition_for(prompt.prompt_id, 4)
    assert [r["at"]["position"] for r in story["rollouts"]] == where(stack.bootstrap, "rollouts", gid)
    assert [(r["finish"], r["truncated"]) for r in story["rollouts"]][2] == ("length", True)
    assert story["scored"]["at"]["position"] == where(stack.bootstrap, "scored", gid)[0]
    assert [(v["status"], v["correct"]) for v in story["scored"]["verdicts"]] == [
        ("OK", True), ("OK", False), ("OK", False), ("OK", True)]
    learner = story["learner"]
    assert (learner["status"], learner["version"], learner["samples_trained"]) == ("trained", 1, 4)
    assert learner["step_loss"] is not None and learner["at"]["topic"] == "metrics"
    advantages = story["advantages"]  # grpo over the shaped rewards 1, 0, 0, 1 (format reward 0): +-1
    assert advantages["outcome"] == "trainable" and advantages["from_version"] == 0
    assert [round(s["advantage"], 3) for s in advantages["samples"]] == [1.0, -1.0, -1.0, 1.0]
    total = sum(len(records(stack.bootstrap, t)) for t in ("prompts", "rollouts", "scored", "metrics"))
    assert 0 < story["records_read"] < total  # its partitions only, from the prompt's time on

    by_prompt, by_rollout = (json.loads(trace(stack.bootstrap, capsys, i, "--json")[1])
                             for i in (prompt.prompt_id, rollout_id_for(gid, 2)))
    assert (by_prompt["reading"], by_rollout["reading"]) == ("prompt", "rollout")
    assert by_prompt["group_id"] == by_rollout["group_id"] == gid
    assert by_rollout["learner"] == learner
    code, text = trace(stack.bootstrap, capsys, gid)
    assert "trained in the step that made v1 (4 samples; step loss" in text and story["scored"]["at"]["position"] in text


def test_the_trace_of_a_skipped_group_says_why(run, capsys):
    stack, asked, _ = run
    prompt = asked["skipped"]
    gid = group_id_for(prompt.prompt_id, prompt.header.message_id)
    story = json.loads(trace(stack.bootstrap, capsys, gid, "--json")[1])
    learner = story["learner"]  # skipped while v0 or v1 was current: the reward service scores groups in parallel
    assert (learner["status"], learner["reason"], learner["version"] in (0, 1)) == ("skipped", "all_rewards_equal", True)
    assert story["advantages"]["outcome"] == "skipped: all_rewards_equal"
    assert [s["advantage"] for s in story["advantages"]["samples"]] == [0.0] * GROUP
    text = trace(stack.bootstrap, capsys, gid)[1]
    assert f"skipped at v{learner['version']}: all_rewards_equal" in text
    assert trace(stack.bootstrap, capsys, "no-such-prompt/0123abcd")[0] == 1


def changed_copy(dest: Path) -> Path:
    """A copy of the code whose arith verifier also accepts the gold plus one (the 'fix' under test)."""
    for name in ("m1flow", "ops", "kernels", "proto", *(p.name for p in ROOT.glob("svc_*"))):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    verifier = dest / "svc_reward" / "verifiers" / "arith.py"
    source = verifier.read_text()
    assert "value == int(gold)" in source
    verifier.write_text(source.replace("value == int(gold)", "value in (int(gold), int(gold) + 1)"))
    return dest


def test_a_reward_replay_through_a_changed_verifier_reports_exactly_the_flipped_verdicts(run, tmp_path, capsys):
    stack, asked, started = run
    code = changed_copy(tmp_path / "code")
    replay = subprocess.run(
        [sys.executable, "-m", "ops", "--run-dir", str(stack.run_dir), "--bootstrap", stack.bootstrap, "replay",
         "--topic", "rollouts", "--from", f"ms:{started}", "--group", "fix", "--service", "reward", "--compare",
         "--json"], cwd=code, env={**os.environ, "PYTHONPATH": str(code)},
        capture_output=True, text=True, timeout=300)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    diff = json.loads(replay.stdout[replay.stdout.index("\n{") + 1:])
    expected = {rollout_id_for(group_id_for(asked[name].prompt_id, asked[name].header.message_id), i)
                for name, i in OFF_BY_ONE}
    assert (diff["groups"], diff["samples"]) == (3, 3 * GROUP)
    assert {c["rollout_id"] for c in diff["changes"]} == expected  # nothing else changed
    assert all(c["flipped"] and (c["before"]["correct"], c["after"]["correct"]) == (False, True)
               for c in diff["changes"])
    assert diff["by_kind"] == {"arith": 2}
    # the same comparison as a command of its own, on the two topics
    code = main(["--bootstrap", stack.bootstrap, "diff", "--original", "scored", "--replayed", "scored.fix",
                 "--since", f"ms:{started}"])
    out = capsys.readouterr().out
    assert code == 1 and "2 verdicts flipped" in out and all(rid in out for rid in expected)


def test_an_unchanged_reward_replay_reports_nothing(run, capsys):
    stack, _, started = run
    code = main(["--run-dir", str(stack.run_dir), "--bootstrap", stack.bootstrap, "replay", "--topic", "rollouts",
                 "--from", f"ms:{started}", "--group", "same", "--service", "reward", "--compare"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "reward replay: 3 groups, 12 samples compared; 0 verdicts flipped, 0 other changes" in out


def get(url: str) -> tuple[int, str]:
    from urllib.error import HTTPError
    from urllib.request import urlopen

    try:
        with urlopen(url, timeout=60) as reply:
            return reply.status, reply.read().decode()
    except HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_dashboard_links_each_scored_group_to_its_story(run):
    from urllib.parse import quote

    from svc_monitor.client import report

    stack, asked, _ = run
    url = report(stack.get("monitor").grpc_address).dashboard_url
    gids = {group_id_for(p.prompt_id, p.header.message_id) for p in asked.values()}

    def listed() -> set[str]:
        return {g["group_id"] for g in json.loads(get(url + "api/dashboard")[1])["groups"]}
    wait_for(lambda: listed() >= gids, 60, "the three groups in the dashboard's table", detail=listed)
    assert "/group?id=" in get(url)[1]  # the table's group cells link to the group's page
    prompt = asked["trained"]
    gid = group_id_for(prompt.prompt_id, prompt.header.message_id)
    status, page = get(f"{url}group?id={quote(gid)}")
    assert status == 200 and "/api/group?id=" in page
    status, body = get(f"{url}api/group?id={quote(gid)}")
    story = json.loads(body)
    assert status == 200 and story["group_id"] == gid and len(story["rollouts"]) == GROUP
    assert (story["learner"]["status"], story["learner"]["version"]) == ("trained", 1)
    assert get(f"{url}api/group")[0] == 400
    if browser_paths() is not None:  # the pages as a browser renders them: the link, then the story
        in_browser(url, gid)


def in_browser(url: str, gid: str) -> None:
    from ops.browser import console_errors, headless_chromium

    link = "return Array.from(document.querySelectorAll('#groups a')).map(a => [a.textContent, a.href]);"
    learner = "return document.getElementById('learner').textContent;"
    with headless_chromium() as driver:
        driver.get(url)
        wait_for(lambda: gid in dict(driver.execute_script(link)), 60, "the group's link in the table")
        driver.get(dict(driver.execute_script(link))[gid])
        wait_for(lambda: "trained in the step that made v1" in driver.execute_script(learner), 60,
                 "the group's page to show the learner's step", detail=lambda: driver.execute_script(learner))
        rows = driver.execute_script("return document.getElementById('rollouts').rows.length;")
        errors = console_errors(driver)
    assert rows == GROUP and errors == []


def test_a_diff_of_rollout_topics_names_the_samples_that_differ(run, capsys):
    """What a rollout replay's comparison reads: the replayed copy on `rollouts.<suffix>`, the
    originals found by group key on their partitions of `rollouts`."""
    from m1flow.bus.admin import ensure_topics

    stack, asked, started = run
    ensure_topics(stack.bootstrap, (ROLLOUTS,), suffix="resampled")
    tok = checkpoint.load_tokenizer(stack.initial_policy())
    again = [r for name in ("trained", "other") for r in rollouts_for(asked[name], ANSWERS[name], tok)]
    again[1].token_ids[-1] += 1  # another token sampled at the end
    again[6].logprobs[0] -= 0.5  # the same tokens, another log-prob
    producer = Producer(stack.bootstrap, "test", suffix="resampled")
    for rollout in again:
        producer.send(ROLLOUTS, rollout.group_id, rollout)
    producer.close()
    capsys.readouterr()
    code = main(["--bootstrap", stack.bootstrap, "diff", "--original", "rollouts", "--replayed",
                 "rollouts.resampled", "--since", f"ms:{started}", "--json"])
    diff = json.loads(capsys.readouterr().out)
    assert code == 1 and diff["samples"] == 2 * GROUP and not diff["no_original"]
    assert [(c["rollout_id"], c["tokens_equal"], c["logprobs_agree"]) for c in diff["changes"]] == [
        (again[1].rollout_id, False, True), (again[6].rollout_id, True, False)]
