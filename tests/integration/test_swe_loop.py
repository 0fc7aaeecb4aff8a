"""A SWE-bench-format source through the loop over the real broker: svc_source reads two instances
(SWE-bench's JSONL fields, snapshots in the run's task store; one needs a package only its repository's
environment has), the rollout stage answers each prompt with a group of two patches, svc_reward scores
them with the `swe` kind through svc_sandbox (the jail, the environment mounted read-only), and
svc_learner trains on the scored groups.

The rollout stage is this test, not svc_rollout: no engine of the project fed by a model we can run
here writes a patch that fixes a repository, so the test reads each Prompt from `prompts` and
publishes real Rollout records on `rollouts`: the gold patch as completion 0 and an answer without a
diff as completion 1, tokenized in the policy's chat template with their log-probabilities under the
learner's starting policy (temperature 1, the full distribution), as an engine would record them.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from google.protobuf import json_format

from m1flow import chat, checkpoint, lm
from m1flow.bus import Producer, codec
from m1flow.bus.topics import ROLLOUTS
from m1flow.contracts import events
from m1flow.data.swebench import instance_snapshot
from m1flow.engines.prompts import prompt_input, prompt_text
from m1flow.task_store import TaskStore
from m1flow.trace.ids import group_id_for, rollout_id_for
from ops.warmstart import WarmStartConfig, warm_started_policy
from svc_sandbox.backends.jail import JailBackend
from tests.integration.helpers import policy_versions, records, scored_by_group, wait_for
from tests.sandbox.test_swe_env_mount import F2P, P2P, area_repo, probe_env

pytestmark = pytest.mark.kafka

GROUP, SOURCE = 2, "swebench-mini"
EMPTY = "I looked at the repository and I believe it is fine as it is."  # no diff: 0, reason no_diff
CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
CALC_TESTS = "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n" \
             "def test_sub():\n    assert sub(5, 3) == 2\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def calc_repo(root: Path) -> tuple[Path, str]:
    repo = root / "calc"
    repo.mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(CALC_TESTS)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "add subtracts")
    (repo / "calc.py").write_text(CALC.replace("return a - b", "return a + b", 1))
    gold = _git(repo, "diff")
    _git(repo, "checkout", "-q", "calc.py")
    return repo, gold


def instances(root: Path, store: TaskStore, env_key: str) -> list[dict]:
    """Two instances as SWE-bench publishes them (FAIL_TO_PASS as JSON text), with m1flow's snapshot
    reference; the second names the environment its tests need."""
    out = []
    for name, (repo, gold), f2p, p2p, env in (
            ("example__calc-1", calc_repo(root), ["test_calc.py::test_add"], ["test_calc.py::test_sub"], ""),
            ("example__area-1", area_repo(root), F2P, P2P, env_key)):
        base = _git(repo, "rev-parse", "HEAD").strip()
        row = {"repo": name.split("-")[0].replace("__", "/"), "instance_id": name, "base_commit": base,
               "patch": gold, "test_patch": "", "problem_statement": f"{name}: a test fails; fix the code.",
               "hints_text": "", "created_at": "2026-12-05T00:00:00Z", "version": "1.0",
               "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p), "environment_setup_commit": base,
               "payload_uri": store.put(instance_snapshot(repo, base)), "license": "MIT"}
        if env:
            row["environment"] = env
        out.append(row)
    return out


class PatchRollouts:
    """The rollout stage of this test: for each prompt, the gold patch and an answer without one, as
    Rollout records with the policy's tokens and log-probabilities."""

    def __init__(self, policy: Path, golds: dict[str, str], bootstrap: str) -> None:
        self.model, self.tok = checkpoint.load_model(policy).eval(), checkpoint.load_tokenizer(policy)
        self.golds, self.producer = golds, Producer(bootstrap, "test-rollout")

    def logprobs(self, prompt_ids: list[int], ids: list[int]) -> list[float]:
        with torch.no_grad():
            logits = lm.logits(self.model, torch.tensor([prompt_ids + ids]))[0, len(prompt_ids) - 1:-1]
        return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()

    def answer(self, prompt: events.Prompt) -> list[events.Rollout]:
        gold = self.golds[prompt.prompt_id.rsplit("/", 1)[-1]]
        group_id = group_id_for(prompt.prompt_id, prompt.header.message_id)
        prompt_ids = chat.prompt_ids(self.tok, prompt_input(prompt))
        out = []
        for i, text in enumerate([f"The fix:\n```diff\n{gold}```", EMPTY]):
            ids = list(self.tok.encode(text, add_special_tokens=False)) + [self.tok.eos_token_id]
            rollout_id = rollout_id_for(group_id, i)
            out.append(events.Rollout(
                header=codec.header("test-rollout", run_id=prompt.header.trace.run_id, group_id=group_id,
                                    rollout_id=rollout_id, policy_version=0),
                rollout_id=rollout_id, group_id=group_id, prompt_id=prompt.prompt_id, index=i, group_size=GROUP,
                task_type=prompt.task_type, prompt_text=prompt_text(prompt), prompt_token_ids=prompt_ids,
                token_ids=ids, logprobs=self.logprobs(prompt_ids, ids), response_text=text,
                finish_reason=events.FINISH_REASON_STOP, policy_version=0, verifier=prompt.verifier,
                max_new_tokens=max(prompt.max_new_tokens, len(ids)), engine="test", temperature=1.0, top_p=1.0,
                source=prompt.source, domain=prompt.domain))
        return out

    def publish(self, prompts: list[events.Prompt]) -> None:
        for prompt in prompts:
            for rollout in self.answer(prompt):
                self.producer.send(ROLLOUTS, rollout.group_id, rollout)
        self.producer.flush()


def learner_per_source(bootstrap: str, name: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for rec in records(bootstrap, "metrics"):
        m = rec["value"]
        if m["name"] == f"learner/source/{name}":
            key = (m["labels"]["source"], m["labels"]["kind"])
            out[key] = out.get(key, 0.0) + m.get("value", 0.0)
    return out


def test_swe_instances_flow_from_the_source_through_reward_and_sandbox_to_the_learner(tmp_path):
    from ops.stack import Stack

    if JailBackend.missing():
        pytest.skip(f"local jail unavailable here: missing {JailBackend.missing()}")
    envs, env = probe_env(tmp_path / "envs-build")
    rows = instances(tmp_path, TaskStore.in_run_dir(tmp_path), env.key)
    data = tmp_path / "swebench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = tmp_path / "sources.json"
    settings.write_text(json.dumps({"sources": [{"path": str(data), "name": SOURCE, "importer": "swebench"}],
                                    "max_epochs": 1, "group_size": GROUP, "batch_groups": len(rows)}))
    policy = warm_started_policy(tmp_path / "policy", WarmStartConfig(arch="qwen2"))
    stack = Stack(tmp_path, model=policy, service_args={
        "source": ["--config", str(settings)],
        "sandbox": ["--backend", "jail", "--swe-envs", str(envs.root)],
        "learner": ["--batch-groups", str(len(rows)), "--batch-timeout-s", "5",
                    "--algorithm", json.dumps({"dynamic_sampling": False, "max_staleness": 100})]})
    try:
        stack.start(services=("sandbox", "reward", "learner", "source"))
        wait_for(lambda: len(records(stack.bootstrap, "prompts")) >= len(rows), 60, "the source's prompts")
        prompts = [json_format.ParseDict(r["value"], events.Prompt(), ignore_unknown_fields=True)
                   for r in records(stack.bootstrap, "prompts")]
        assert sorted(p.prompt_id for p in prompts) == sorted(f"{SOURCE}/{r['instance_id']}" for r in rows)
        assert {p.verifier.kind for p in prompts} == {"swe"}
        PatchRollouts(policy, {r["instance_id"]: r["patch"] for r in rows}, stack.bootstrap).publish(prompts)

        wait_for(lambda: len(scored_by_group(stack.bootstrap)) >= len(rows), 120, "both groups scored")
        for versions in scored_by_group(stack.bootstrap).values():
            group = versions[0]
            assert (group["source"], group["verifier_kind"]) == (SOURCE, "swe")
            samples = sorted(group["samples"], key=lambda s: s.get("index", 0))
            got = [(s.get("reward", 0.0), s.get("correct", False), s.get("reason")) for s in samples]
            assert got == [(1.0, True, "resolved"), (0.0, False, "no_diff")], (group["prompt_id"], samples)
            assert samples[1]["status"] == "STATUS_FORMAT_ERROR"

        wait_for(lambda: max(policy_versions(stack.bootstrap), default=0) >= 1, 120, "the learner's step")
        wait_for(lambda: learner_per_source(stack.bootstrap, "groups").get((SOURCE, "swe")) == len(rows), 60,
                 "the learner's per-source metrics")
        assert learner_per_source(stack.bootstrap, "samples_trained") == {(SOURCE, "swe"): GROUP * len(rows)}
        assert records(stack.bootstrap, "dlq") == []
    finally:
        stack.stop()
