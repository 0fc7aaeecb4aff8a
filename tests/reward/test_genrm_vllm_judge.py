"""The OpenAI-compatible judge pointed at a served model: vLLM's own OpenAI server, started here on the
CPU with the project's small Qwen2 policy, judging general-task groups through `GenRMKind` (what
svc_reward builds from its `genrm:` block).

The model was never taught to judge, so it is held to the verdict marks by vLLM's structured outputs
(`openai.extra_body`), the way a production judge's answer format is constrained; without them its
free text is no verdict, and each answer's status says so (JUDGE_ERROR), never a reward.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from m1flow.runtime.ports import free_port
from m1flow.tasks.general import make_instruction, sample_answer
from svc_reward.genrm import GenRMKindConfig
from svc_reward.result import Status
from svc_reward.verifiers.genrm import GenRMKind

pytestmark = pytest.mark.slow  # a vLLM server started on the CPU: not the unit tier (make test-fast)

MARKS = ["[[A]]", "[[B]]", "[[TIE]]"]
START_S = 600  # a loaded 2-core machine took 199 s to serve its first request


@pytest.fixture(scope="module")
def served_judge(qwen2_policy: Path, tmp_path_factory: pytest.TempPathFactory):
    """The base URL of `vllm.entrypoints.openai.api_server` serving the policy as model "judge"."""
    pytest.importorskip("vllm")
    port, log = free_port(), tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(qwen2_policy),
             "--served-model-name", "judge", "--enforce-eager", "--max-model-len", "2048",
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM's server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM's server not up after {START_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def kind_for(base: str, **openai) -> GenRMKind:
    cfg = GenRMKindConfig(judge="openai", openai={"base_url": base, "model": "judge", "max_tokens": 8,
                                                   "retries": 0, **openai})
    kind = GenRMKind.from_config(cfg)
    assert kind is not None
    return kind


def general_groups(n: int, size: int = 4) -> list[tuple[str, list[str]]]:
    rng = random.Random(0)
    out = []
    for _ in range(n):
        prompt = make_instruction(rng)
        out.append((prompt, [sample_answer(rng, prompt, 3, 12) for _ in range(size)]))
    return out


def test_a_served_model_judges_groups_in_both_orders(served_judge):
    kind = kind_for(served_judge, extra_body={"structured_outputs": {"choice": MARKS}})
    for prompt, answers in general_groups(3):
        group = kind.scorer.score_group(prompt, answers)
        assert group.reference in answers
        assert all(r.status is Status.OK for r in group.results), [r.detail for r in group.results]
        assert all(-1.0 <= r.reward <= 1.0 and r.parts.genrm == r.reward for r in group.results)
        assert all("s_AB=" in r.detail and "s_BA=" in r.detail for r in group.results)  # both orders asked
    assert len(kind.scorer.history) == 3 * 3 and len(kind.scorer.games) == 3 * 4  # the fit's inputs
    assert 0.0 <= kind.flip_rate <= 1.0


def test_free_text_from_an_unconstrained_model_is_a_judge_error_not_a_reward(served_judge):
    kind = kind_for(served_judge)
    prompt, answers = general_groups(1)[0]
    results = kind.scorer.score_group(prompt, answers).results
    assert all(r.status is Status.JUDGE_ERROR for r in results), [r.detail for r in results]
