"""Code rewards: programs from model answers run on stdin/stdout tests in the local jail."""
from __future__ import annotations

import pytest

from svc_reward.result import Status
from svc_reward.verifiers.code import CodeRewardConfig, CodeVerifier, TestCase, extract_code, outputs_match
from svc_sandbox.client import ExecResult, Limits

LIMITS = Limits(cpu_seconds=1, wall_seconds=3, max_processes=16)
ADD_TESTS = [TestCase(stdin="1 2\n", expected_stdout="3\n"), TestCase(stdin="10 -4\n", expected_stdout="6"),
             TestCase(stdin="0 0\n", expected_stdout="0\n")]


def answer(code: str, lang: str = "python") -> str:
    return f"<think>try ```python\nprint('draft')\n```</think>Here it is:\n```{lang}\n{code}\n```\nDone."


@pytest.fixture
def verifier(jail_sandbox):
    return CodeVerifier(jail_sandbox, CodeRewardConfig(limits=LIMITS))


def test_extract_code_takes_the_last_block_after_reasoning():
    text = "```python\nA\n```\ntext\n```\nB\n```\n```python\nC\n```"
    assert extract_code(text) == "C\n"
    assert extract_code("```\nonly untagged\n```") == "only untagged\n"
    assert extract_code("```cpp\nint main(){}\n```\n```text\nlog\n```", "c++") == "int main(){}\n"
    assert extract_code(answer("print(1)")) == "print(1)\n"
    assert extract_code("<think>```python\nx\n```</think> no code") is None
    assert extract_code("no code at all") is None


@pytest.mark.parametrize("actual,expected,same", [
    ("1 2\n", "1  2", True), ("1\r\n2\r\n\n\n", "1\n2", True), ("  3\t\n", "3", True),
    ("12", "1 2", False), ("1\n\n2", "1\n2", False), ("3\n", "3.0", False), ("", "0", False),
])
def test_outputs_compare_by_whitespace_normalised_lines(actual, expected, same):
    assert outputs_match(actual, expected) is same


@pytest.mark.parametrize("parallel", [1, 3])
def test_correct_program_scores_one(jail_sandbox, parallel):
    verifier = CodeVerifier(jail_sandbox, CodeRewardConfig(limits=LIMITS, parallel=parallel))
    result = verifier.verify(answer("a, b = map(int, input().split())\nprint(a + b)"), ADD_TESTS)
    assert (result.reward, result.correct, result.status) == (1.0, True, Status.OK), result.detail
    assert result.parts.correctness == 1.0


def test_partly_correct_program_scores_the_fraction_or_nothing(jail_sandbox, verifier):
    code = "a, b = map(int, input().split())\nprint(a + b if a >= 0 and b >= 0 else a - b)"
    fraction = verifier.verify(answer(code), ADD_TESTS)
    assert fraction.reward == pytest.approx(2 / 3) and fraction.correct is False
    assert "test 1: wrong_answer" in fraction.detail
    strict = CodeVerifier(jail_sandbox, CodeRewardConfig(mode="all", limits=LIMITS)).verify(answer(code), ADD_TESTS)
    assert (strict.reward, strict.correct, strict.status) == (0.0, False, Status.OK)


def test_looping_and_crashing_programs_fail_their_tests_but_stay_usable(jail_sandbox):
    strict = CodeVerifier(jail_sandbox, CodeRewardConfig(mode="all", limits=LIMITS))
    looping = strict.verify(answer("while True:\n    pass"), ADD_TESTS)
    assert (looping.reward, looping.status, looping.usable) == (0.0, Status.OK, True)
    assert looping.detail.startswith("passed 0/3; test 0: time_limit") and "test 1" not in looping.detail
    crashing = strict.verify(answer("raise SystemExit(1)"), ADD_TESTS)
    assert crashing.reward == 0.0 and "runtime_error" in crashing.detail


def test_c_program_and_compile_error(verifier):
    c = '#include <stdio.h>\nint main(){long a,b;scanf("%ld %ld",&a,&b);printf("%ld\\n",a+b);}'
    assert verifier.verify(answer(c, "c"), ADD_TESTS, language="c").reward == 1.0
    broken = verifier.verify(answer("int main( {", "c"), ADD_TESTS, language="c")
    assert (broken.reward, broken.status) == (0.0, Status.OK)
    assert "compile_error" in broken.detail


def test_missing_code_block_is_a_format_error(verifier):
    result = verifier.verify("The answer is to add the numbers.", ADD_TESTS)
    assert (result.status, result.reward, result.correct) == (Status.FORMAT_ERROR, 0.0, False)


def test_sandbox_failure_is_not_a_zero_reward():
    broken = CodeVerifier(lambda request: ExecResult.sandbox_error("engine down"), CodeRewardConfig(limits=LIMITS))
    result = broken.score_code("print(3)", ADD_TESTS)
    assert result.status is Status.SANDBOX_ERROR and result.usable is False and result.correct is None


def test_a_task_the_sandbox_refuses_is_a_judge_error_not_a_zero_reward(verifier):
    result = verifier.score_code("x", ADD_TESTS, language="cobol")
    assert result.status is Status.JUDGE_ERROR and result.usable is False and result.correct is None
    assert "language" in result.detail


FUNCTION_TASK = {"prompt": "import math\n\n\ndef hyp(a, b):\n    \"\"\"Hypotenuse.\"\"\"\n",
                 "test": "def check(candidate):\n    assert candidate(3, 4) == 5\n", "entry_point": "hyp"}


@pytest.mark.parametrize("code,passes", [
    ("def hyp(a, b):\n    return math.sqrt(a * a + b * b)\n", True),  # whole function, prompt's import used
    ("    return math.hypot(a, b)\n", True),                           # completes the prompt's body
    ("def hyp(a, b):\n    return a + b\n", False),
    ("def hyp(a, b):\n    raise SystemExit(0)\n", False),               # exiting 0 early is not passing check()
    ("def hyp(a, b):\n    import os\n    os._exit(0)\n", False),
])
def test_function_level_tests_must_exit_zero(jail_sandbox, verifier, code, passes):
    from svc_reward.verifiers.code import FunctionTest

    result = verifier.verify_function(answer(code), FunctionTest(**FUNCTION_TASK))
    assert (result.status, result.correct, result.reward) == (Status.OK, passes, float(passes)), result.detail
