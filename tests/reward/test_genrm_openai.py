"""OpenAIJudge against a real HTTP endpoint started in the test.

The server speaks the chat-completions protocol on 127.0.0.1 and judges like a deterministic model:
it reads the two responses out of the prompt it receives and prefers the longer one. Modes make it
fail the way real servers do (503 under load, 400, garbage text, hanging past the timeout).
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from svc_reward.genrm import (Comparer, GenRMConfig, GenRMScorer, JudgeError, OpenAIJudge,
                              OpenAIJudgeConfig)
from svc_reward.genrm.prompts import END_A, END_B, START_A, START_B
from svc_reward.result import Status


def between(text, start, end):
    return text.split(start + "\n", 1)[1].split("\n" + end, 1)[0]


class JudgeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests, self.fail_first, self.mode = [], 0, "judge"
        self.lock = threading.Lock()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:
            server.requests.append({"path": self.path, "body": body,
                                    "auth": self.headers.get("Authorization")})
            failing = len(server.requests) <= server.fail_first
        if self.path != "/v1/chat/completions":
            return self.reply(404, {"error": "no such route"})
        if failing:
            return self.reply(503, {"error": "overloaded"})
        if server.mode == "bad_request":
            return self.reply(400, {"error": "bad request"})
        if server.mode == "hang":
            time.sleep(1.0)
        user = body["messages"][-1]["content"]
        a, b = between(user, START_A, END_A), between(user, START_B, END_B)
        verdict = "[[A]]" if len(a) > len(b) else "[[B]]" if len(b) > len(a) else "[[TIE]]"
        text = "I cannot decide." if server.mode == "garbage" else f"A has {len(a)} chars, B {len(b)}.\n{verdict}"
        self.reply(200, {"id": "x", "object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}]})

    def reply(self, code, payload):
        data = json.dumps(payload).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass


@pytest.fixture
def server():
    srv = JudgeServer()
    thread = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def judge_for(server, sleeps=None, **overrides):
    cfg = OpenAIJudgeConfig(base_url=server.base_url, model="judge-7b", backoff_s=0.01, **overrides)
    return OpenAIJudge(cfg, sleep=sleeps.append if sleeps is not None else time.sleep)


def test_verdicts_in_both_orders_over_http(server):
    judge = judge_for(server, api_key="secret", max_tokens=77)
    comparison = Comparer(judge).compare("Explain tides.", "The moon pulls the oceans.", "Moon.")
    assert comparison.score == 1.0 and comparison.flips == 0
    assert len(server.requests) == 2
    first, second = (r["body"] for r in server.requests)
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert server.requests[0]["auth"] == "Bearer secret"
    assert first["model"] == "judge-7b" and first["max_tokens"] == 77 and first["temperature"] == 0.0
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert between(first["messages"][1]["content"], START_A, END_A) == "The moon pulls the oceans."
    assert between(second["messages"][1]["content"], START_A, END_A) == "Moon."


def test_transient_failures_are_retried_with_backoff(server):
    server.fail_first = 2
    sleeps = []
    assert judge_for(server, sleeps, retries=3).judge("q", "long answer", "short") == 1
    assert len(server.requests) == 3 and sleeps == [0.01, 0.02]


def test_retries_run_out_into_a_judge_error(server):
    server.fail_first = 10
    sleeps = []
    with pytest.raises(JudgeError, match="3 attempts"):
        judge_for(server, sleeps, retries=2).judge("q", "a", "b")
    assert len(server.requests) == 3 and len(sleeps) == 2


def test_client_errors_are_not_retried(server):
    server.mode = "bad_request"
    with pytest.raises(JudgeError, match="400"):
        judge_for(server, [], retries=3).judge("q", "a", "b")
    assert len(server.requests) == 1


def test_a_hanging_server_times_out(server):
    server.mode = "hang"
    started = time.monotonic()
    with pytest.raises(JudgeError):
        judge_for(server, [], retries=1, timeout_s=0.2).judge("q", "a", "b")
    assert time.monotonic() - started < 0.9 and len(server.requests) == 2


def test_unreachable_endpoint_is_a_judge_error(server):
    url = server.base_url
    server.shutdown()
    server.server_close()
    judge = OpenAIJudge(OpenAIJudgeConfig(base_url=url, retries=1, backoff_s=0.0, timeout_s=1.0))
    with pytest.raises(JudgeError):
        judge.judge("q", "a", "b")


def test_unreadable_verdict_becomes_judge_error_status_not_reward(server):
    server.mode = "garbage"
    scorer = GenRMScorer(judge_for(server))
    [result] = scorer.score_against("q", ["an answer"], "the reference answer")
    assert result.status is Status.JUDGE_ERROR and not result.usable and result.correct is None


def test_tournament_and_scores_through_the_endpoint_in_parallel(server):
    candidates = ["x" * n for n in (5, 40, 12, 33, 8, 21, 2, 17)]
    scorer = GenRMScorer(judge_for(server), GenRMConfig(concurrency=4))
    group = scorer.score_group("Write something.", candidates)
    assert group.reference == "x" * 40
    assert [r.reward for r in group.results] == [-1.0, 0.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]
    assert all(r.status is Status.OK and r.parts.genrm == r.reward for r in group.results)
