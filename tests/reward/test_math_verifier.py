"""What the math verifier accepts and rejects, through the real worker pool.

Each row states what our verifier does today. The comment says whether that is right, or a known
false positive (FP: wrong answer accepted) / false negative (FN: right answer rejected).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from svc_reward.result import Status
from svc_reward.verifiers.extract import extract_math_answer, last_boxed, last_tag
from svc_reward.verifiers.math import MathVerifierPool, MathVerifyConfig, verify_math

OK, NO, FMT = True, False, "format_error"

CASES = [
    # (response, gold, expected, comment)
    (r"\boxed{4}", "4", OK, "right: plain integer"),
    (r"\boxed{5}", "4", NO, "right"),
    (r"\boxed{\frac12}", "0.5", OK, "right: fraction vs decimal"),
    (r"\boxed{\dfrac{3}{4}}", "0.75", OK, "right: dfrac"),
    (r"\boxed{\frac{2}{4}}", r"\frac12", OK, "right: unreduced fraction"),
    (r"\boxed{0.333333}", r"\frac13", OK, "right by design: math-verify rounds to 6 places"),
    (r"\boxed{0.33}", r"\frac13", NO, "right: too coarse"),
    (r"\boxed{\pi}", "3.14159", NO, "arguable FN: pi vs 6 digits; we want exact answers"),
    (r"\boxed{3.14}", r"\pi", NO, "right"),
    (r"\boxed{\sqrt{2}/2}", r"\frac{1}{\sqrt2}", OK, "right: symbolic equality"),
    (r"\boxed{3\sqrt{3}}", r"\sqrt{27}", OK, "right"),
    (r"\boxed{x^2+2x+1}", "(x+1)^2", OK, "right: polynomial identity"),
    (r"\boxed{a+b}", "b+a", OK, "right"),
    (r"\boxed{\sin^2 x+\cos^2 x}", "1", OK, "right: trig simplification"),
    (r"\boxed{\log_2 8}", "3", OK, "right"),
    (r"\boxed{2i}", "2i", OK, "right: complex"),
    (r"\boxed{1+i}", "1-i", NO, "right"),
    (r"\boxed{\infty}", r"\infty", OK, "right"),
    (r"\boxed{-\infty}", r"\infty", NO, "right"),
    (r"\boxed{(1,2)}", "(1,2]", NO, "right: open vs half-open interval"),
    (r"\boxed{[1,2]}", "[1,2]", OK, "right"),
    (r"\boxed{x\in(0,1)}", "(0,1)", OK, "right: membership vs interval"),
    (r"\boxed{x>1}", r"(1,\infty)", NO, "FN: relation vs interval gold not compared (set-relation off)"),
    (r"\boxed{1,2,3}", r"\{3,2,1\}", OK, "right: unordered set"),
    (r"\boxed{(3,2,1)}", "(1,2,3)", NO, "right: tuples are ordered"),
    (r"\boxed{2,3}", "2", NO, "right: extra root"),
    (r"\boxed{\begin{pmatrix}1&2\end{pmatrix}}", r"\begin{pmatrix}1&2\end{pmatrix}", OK, "right: matrix"),
    (r"\boxed{50\%}", r"\frac12", OK, "right: percentage"),
    (r"\boxed{12^\circ}", "12", OK, "right: degrees dropped"),
    (r"\boxed{12\text{ cm}}", "12", OK, "right: units dropped"),
    (r"\boxed{2}", "x=2", OK, "right: assignment against bare value"),
    (r"\boxed{y=2x+1}", "y=1+2x", OK, "right: equal equations"),
    (r"\boxed{x+1=0}", "2x+2=0", NO, "FN (minor): scaled equation is the same solution set"),
    (r"\boxed{\text{(A)}}", "A", OK, "right: multiple choice letter"),
    (r"\boxed{B}", "A", NO, "right"),
    (r"\boxed{1000000}", "1000001", NO, "right: large numbers compared exactly"),
    (r"\boxed{1e6}", "1000000", NO, "FN: scientific notation is not read"),
    (r"\boxed{1,000}", "1000", OK, "right: thousands separator"),
    (r"\boxed{1\,000}", "1000", OK, "right, fixed by us: thin-space digit groups joined"),
    # known wrong answers of math-verify (issue tracker) and what we do about them
    (r"\boxed{2+2=4}", "1+1=2", NO, "fixed by us: math-verify says equal (both reduce to 0=0)"),
    (r"\boxed{x+1=x+1}", "2x=2x", NO, "fixed by us: two identities are not the same answer"),
    (r"\boxed{x-x=0}", "y-y=0", OK, "known FP, kept: each side is 0 in both, we compare sides only"),
    (r"\boxed{\frac{1}{2006!}}", r"\frac{1}{2004!}", NO, "fixed by us: math-verify rounds both to 0"),
    (r"\boxed{10^{-20}}", "10^{-21}", NO, "fixed by us: tiny numbers compared relatively"),
    (r"\boxed{10^{-20}}", r"\frac{1}{10^{20}}", OK, "right: tiny but equal"),
    ("The final answer is **3**.", "3", OK, "fixed by us: markdown bold answer extracted"),
    ("The final answer is **4**.", "3", NO, "right: bold answer read and wrong"),
    ("**Answer:** 7", "7", OK, "right: bold label"),
    ("Answer: $x = 2$", "2", OK, "right: Answer line with math delimiters"),
    ("So we get **3** apples, then double.", "3", FMT, "right: bold outside an answer line is not an answer"),
    # the final-answer forms of common math RL datasets besides \boxed{}
    ("Step 1: 17 + 17 = 34.\nAnswer: 34", "34", OK, "right: DAPO-Math's last line 'Answer: $Answer'"),
    ("We find x=3.\nAnswer: $\\frac{1}{2}$", "0.5", OK, "right: DAPO-Math with math delimiters"),
    ("Answer: 35", "34", NO, "right: DAPO-Math line read and wrong"),
    ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72", OK, "right: GSM8K's '#### 72' final line"),
    ("#### 1,000", "1000", OK, "right: GSM8K with a thousands separator"),
    ("<think>7 or 8?</think><answer> 8 </answer>", "8", OK, "right: R1-Zero style <answer> tag"),
    ("<think>x</think><answer>$\\frac{3}{4}$</answer>", "0.75", OK, "right: answer tag with delimiters"),
    ("Final Answer: The final answer is $42$. I hope it is correct.", "42", OK,
     "right: Minerva / lighteval MATH format"),
    ("Adding them up, the answer is 12.", "12", OK, "right: 'the answer is' sentence"),
    ("The final answer is $\\frac{3}{4}$.", "0.75", OK, "right: 'final answer is' with delimiters"),
    # extraction rules
    (r"first \boxed{1} then \boxed{2}", "2", OK, "right: the last box wins"),
    (r"<think>maybe \boxed{2}</think> so \boxed{3}", "3", OK, "right: reasoning ignored"),
    (r"<think>maybe \boxed{3}</think> I am not sure.", "3", FMT, "right: answer only inside reasoning"),
    (r"\boxed{\frac{1}{2}}", r"\boxed{0.5}", OK, "right: boxed gold accepted as is"),
    ("I think it is 4", "4", FMT, "right: no boxed/Answer line is a format error"),
    (r"\boxed{", "4", FMT, "right: unbalanced box"),
    ("", "4", FMT, "right: empty"),
]


@pytest.fixture(scope="module")
def pool():
    with MathVerifierPool(MathVerifyConfig(workers=2, timeout_s=30)) as p:
        yield p


def test_table_is_large_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize("response,gold,expected,comment", CASES, ids=[c[3][:40] for c in CASES])
def test_math_case(pool, response, gold, expected, comment):
    result = pool.verify(response, gold)
    if expected == FMT:
        assert result.status is Status.FORMAT_ERROR, result
        assert result.reward == 0.0 and result.correct is False
    else:
        assert result.status is Status.OK, result
        assert result.correct is expected, (comment, result.detail)
        assert result.reward == (1.0 if expected else 0.0)


def test_extraction_helpers():
    assert last_boxed(r"\boxed{\frac{a}{b}} and \boxed{x^{2}}") == "x^{2}"
    assert last_boxed(r"\boxed{a} \boxed{b") == "a"
    assert last_tag("<answer>1</answer> then <answer> 2 </answer>") == "2"
    assert last_tag("<think><answer>1</answer></think>no answer") is None
    assert extract_math_answer(r"Answer: \boxed{5}") == "5"


def test_unparsable_gold_is_judge_error_not_zero(pool):
    for gold in ("", "$ $", r"\boxed{}"):
        result = pool.verify(r"\boxed{3}", gold)
        assert result.status is Status.JUDGE_ERROR and not result.usable, gold


def test_deadline_kills_and_replaces_worker():
    with MathVerifierPool(MathVerifyConfig(workers=1)) as p:
        assert p.verify(r"\boxed{1}", "1").correct is True
        first = p._idle.get()
        p._idle.put(first)
        slow = p.verify(r"\boxed{9^{9^{9^{9}}}}", "3", timeout_s=1.0)
        assert slow.status.is_infra_failure and not slow.usable and "math-verify over" in slow.detail
        assert not first.alive()
        assert p.verify(r"\boxed{3}", "3").correct is True
        second = p._idle.get()
        assert second.alive() and second.process.pid != first.process.pid
        second.kill()


def test_worker_death_is_an_infra_failure():
    with MathVerifierPool(MathVerifyConfig(workers=1)) as p:
        assert p.verify(r"\boxed{1}", "1").correct is True
        worker = p._idle.get()
        p._idle.put(worker)
        results = []
        runner = threading.Thread(target=lambda: results.append(
            p.verify(r"\boxed{9^{9^{9^{9}}}}", "3", timeout_s=60)))
        runner.start()
        time.sleep(0.5)
        worker.process.kill()
        runner.join(30)
        assert results and results[0].status is Status.SANDBOX_ERROR and not results[0].usable
        assert p.verify(r"\boxed{2}", "2").correct is True


def test_pool_is_thread_safe(pool):
    golds = [str(n) for n in range(12)]
    results: dict[int, bool | None] = {}

    def work(i: int) -> None:
        answer = golds[i] if i % 2 == 0 else golds[(i + 1) % 12]
        results[i] = pool.verify(rf"\boxed{{{answer}}}", golds[i]).correct

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: i % 2 == 0 for i in range(12)}


def test_verify_math_works_from_a_plain_script_without_a_main_guard(tmp_path):
    """Workers must not re-run the caller's main module: its lines print once, and the checks work."""
    script = tmp_path / "plain.py"
    script.write_text("from svc_reward.verifiers.math import verify_math\n"
                      "print('side effect')\n"
                      "print(verify_math('Answer: 34', '34', timeout_s=60).correct)\n"
                      "print(verify_math(r'\\boxed{5}', '4', timeout_s=60).correct)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.stdout == "side effect\nTrue\nFalse\n", done.stderr[-2000:]


def test_verify_math_uses_shared_pool():
    assert verify_math(r"\boxed{\frac{6}{8}}", "3/4", timeout_s=30).correct is True
    assert verify_math("no answer", "3/4").status is Status.FORMAT_ERROR
