"""Competitive-programming rewards: the model's program runs on stdin/stdout test cases in the sandbox.

Why an executor callable: the verifier must never run model code itself. It hands each run to
`executor(ExecRequest) -> ExecResult`: the local jail in tests, a gRPC client of svc_sandbox in the
service (both from `svc_sandbox.client`). A program that crashes, loops or floods its output fails
that test (reward 0 for it); only an infrastructure failure (SANDBOX_ERROR) marks the sample
unusable, since it says nothing about the program. A task the sandbox refuses (an unsupported
language, a limit over the server's cap) is the task's fault: JUDGE_ERROR, never a 0.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from pydantic import BaseModel, Field

from m1flow.chat import after_reasoning
from m1flow.contracts import events
from svc_reward.kinds import KINDS, KindContext
from svc_reward.result import RewardParts, ScoreResult, Status
from svc_sandbox.client import Executor, ExecRequest, ExecResult, InvalidRequest, Limits, fence_tags
from svc_sandbox.client import Status as RunStatus

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)


class TestCase(BaseModel):
    __test__ = False  # not a pytest class
    stdin: str = ""
    expected_stdout: str


class CodeRewardConfig(BaseModel):
    mode: Literal["fraction", "all"] = Field("fraction", description="fraction of tests passed, or 1 only if all pass")
    limits: Limits = Field(default_factory=Limits, description="limits of each test run")
    parallel: int = Field(1, ge=1, description="test cases run at once")


def extract_code(response: str, language: str = "python") -> str | None:
    """The last fenced code block in the answer, preferring blocks tagged with the language."""
    blocks = _FENCE.findall(after_reasoning(response))
    if not blocks:
        return None
    wanted = fence_tags(language)
    for preferred in (lambda tag: tag.lower() in wanted, lambda tag: tag == "", lambda tag: True):
        chosen = [code for tag, code in blocks if preferred(tag)]
        if chosen:
            return chosen[-1]
    return None


def normalise(text: str) -> list[str]:
    """Lines with runs of whitespace collapsed, trailing blank lines dropped."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    return normalise(actual) == normalise(expected)


def _verdict(result: ExecResult, case: TestCase) -> str:
    """'pass', or why the test failed."""
    if result.status is not RunStatus.OK:
        return result.status.name.lower()
    return "pass" if outputs_match(result.stdout_text, case.expected_stdout) else "wrong_answer"


class CodeVerifier:
    def __init__(self, executor: Executor, config: CodeRewardConfig | None = None):
        self.executor = executor
        self.config = config or CodeRewardConfig()

    def verify(self, response: str, tests: Sequence[TestCase], language: str = "python") -> ScoreResult:
        """Score a model response: extract its program, then run it on the tests."""
        code = extract_code(response, language)
        if code is None:
            return ScoreResult.failed(Status.FORMAT_ERROR, "no fenced code block in the answer")
        return self.score_code(code, tests, language)

    def score_code(self, code: str, tests: Sequence[TestCase], language: str = "python") -> ScoreResult:
        if not tests:
            return ScoreResult.failed(Status.JUDGE_ERROR, "no test cases")
        verdicts: list[str] = []

        def run(case: TestCase) -> ExecResult:
            return self.executor(ExecRequest(language=language, code=code, stdin=case.stdin.encode(),
                                             limits=self.config.limits))

        with ThreadPoolExecutor(self.config.parallel) as pool:
            for start in range(0, len(tests), self.config.parallel):
                batch = tests[start:start + self.config.parallel]
                try:
                    results = list(pool.map(run, batch))
                except InvalidRequest as err:
                    return ScoreResult.failed(Status.JUDGE_ERROR, f"the sandbox refused the task: {err}")
                for case, result in zip(batch, results):
                    if result.status.is_infra_failure:
                        return ScoreResult.failed(Status.SANDBOX_ERROR, result.detail)
                    verdicts.append(_verdict(result, case))
                    if result.status is RunStatus.COMPILE_ERROR:
                        return self._score(verdicts, len(tests), result.stderr_text[-300:])
                if self.config.mode == "all" and any(v != "pass" for v in verdicts):
                    break
        return self._score(verdicts, len(tests))

    def _score(self, verdicts: list[str], total: int, note: str = "") -> ScoreResult:
        passed = verdicts.count("pass")
        failures = [f"test {i}: {v}" for i, v in enumerate(verdicts) if v != "pass"]
        detail = f"passed {passed}/{total}" + (f"; {', '.join(failures[:5])}" if failures else "")
        detail += f"; {note}" if note else ""
        correct = passed == total
        reward = float(correct) if self.config.mode == "all" else passed / total
        return ScoreResult(reward=reward, correct=correct, status=Status.OK,
                           parts=RewardParts(correctness=reward), detail=detail[:500])


class CodeKind:
    """The `code` kind: stdin/stdout tests run in svc_sandbox; spec_json {"tests": [...], "language": ...}."""

    def __init__(self, executor: Executor, config: CodeRewardConfig) -> None:
        self.verifier = CodeVerifier(executor, config)

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        data = json.loads(spec.spec_json)
        tests = [TestCase.model_validate(t) for t in data["tests"]]
        return self.verifier.verify(response, tests, data.get("language", "python"))


@KINDS.register("code")
def code_kind(ctx: KindContext) -> CodeKind:
    return CodeKind(ctx.sandbox(), ctx.config.code)
