"""Code rewards: the model's program runs in the sandbox on stdin/stdout test cases (competitive
programming), or, HumanEval style, with a test suite appended that must exit 0 (`verify_function`).

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
import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel, Field

from m1flow.chat import after_reasoning
from m1flow.contracts import events
from svc_reward.config import CodeRewardConfig
from svc_reward.kinds import SCORERS, KindContext
from svc_reward.result import RewardParts, ScoreResult, Status
from svc_sandbox.client import Executor, ExecRequest, ExecResult, InvalidRequest, fence_tags
from svc_sandbox.client import Status as RunStatus

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)


class TestCase(BaseModel):
    __test__ = False  # not a pytest class
    stdin: str = ""
    expected_stdout: str


class FunctionTest(BaseModel):
    """A function-level task: the program, then `test` (defining check), then check(entry_point)."""
    __test__ = False  # not a pytest class
    test: str
    entry_point: str
    prompt: str = Field("", description="the signature and docstring the answer completes")


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


def function_program(code: str, task: FunctionTest, sentinel: str = "") -> str:
    """The program a function-level test runs: the prompt (its imports and helpers; a function with
    only a docstring is valid Python) then the answer, which either redefines the entry point or,
    indented, completes the prompt's body; then the test, check(entry_point) and the sentinel."""
    joint = "\n\n" if f"def {task.entry_point}(" in code else ""
    done = f"\nprint({sentinel!r})\n" if sentinel else ""
    return f"{task.prompt}{joint}{code}\n\n{task.test}\n\ncheck({task.entry_point})\n{done}"


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

    def verify_function(self, response: str, task: FunctionTest) -> ScoreResult:
        """1 when the answer's function passes the task's check() (the whole run exits 0), else 0."""
        code = extract_code(response, "python")
        if code is None:
            return ScoreResult.failed(Status.FORMAT_ERROR, "no fenced code block in the answer")
        sentinel = f"check passed {secrets.token_hex(8)}"  # an answer that exits 0 early never prints it
        try:
            result = self.executor(ExecRequest(language="python", code=function_program(code, task, sentinel),
                                               limits=self.config.limits))
        except InvalidRequest as err:
            return ScoreResult.failed(Status.JUDGE_ERROR, f"the sandbox refused the task: {err}")
        if result.status.is_infra_failure:
            return ScoreResult.failed(Status.SANDBOX_ERROR, result.detail)
        if result.ok and result.stdout_text.rstrip().endswith(sentinel):
            return ScoreResult.scored(True, f"check({task.entry_point}) passed")
        if result.ok:
            return ScoreResult.scored(False, "exited before check() finished")
        why = result.stderr_text.strip().splitlines()[-1:] or [result.detail]
        return ScoreResult.scored(False, f"{result.status.name.lower()}: {why[0][:300]}")

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
    """The `code` kind, run in svc_sandbox. spec_json: {"tests": [...], "language": ...} (stdin/stdout),
    or {"style": "function", "test": ..., "entry_point": ..., "prompt": ...} (HumanEval style)."""

    def __init__(self, executor: Executor, config: CodeRewardConfig) -> None:
        self.verifier = CodeVerifier(executor, config)

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        data = json.loads(spec.spec_json)
        if data.get("style") == "function":
            return self.verifier.verify_function(response, FunctionTest.model_validate(data))
        tests = [TestCase.model_validate(t) for t in data["tests"]]
        return self.verifier.verify(response, tests, data.get("language", "python"))


@SCORERS.register("code")
def code_kind(ctx: KindContext) -> CodeKind:
    return CodeKind(ctx.sandbox(), ctx.config.code)
