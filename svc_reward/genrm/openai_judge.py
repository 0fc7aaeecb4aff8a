"""A judge served over an OpenAI-compatible chat-completions endpoint (what vLLM serves).

Standard library only (urllib), so the reward worker needs no HTTP client package. Transport
failures that may pass (refused connection, timeout, HTTP 429 and 5xx) are retried with
exponential backoff; anything else, or running out of attempts, is a JudgeError.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from .config import OpenAIJudgeConfig
from .judge import ChatJudge, JudgeError


class _Transient(Exception):
    """A failure worth another attempt."""


class OpenAIJudge(ChatJudge):
    def __init__(self, config: OpenAIJudgeConfig | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config or OpenAIJudgeConfig()
        self.url = self.config.base_url.rstrip("/") + "/chat/completions"
        self._sleep = sleep

    def complete(self, messages: list[dict[str, str]]) -> str:
        cfg = self.config
        body = json.dumps({
            **cfg.extra_body, "model": cfg.model, "messages": messages,
            "temperature": cfg.temperature, "max_tokens": cfg.max_tokens,
        }).encode()
        last: Exception | None = None
        for attempt in range(cfg.retries + 1):
            if attempt:
                self._sleep(cfg.backoff_s * 2 ** (attempt - 1))
            try:
                return _reply_text(self._post(body))
            except _Transient as err:
                last = err
        raise JudgeError(f"judge at {self.url} failed after {cfg.retries + 1} attempts: {last}")

    def _post(self, body: bytes) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            detail = f"HTTP {err.code}: {err.read()[:200]!r}"
            if err.code == 429 or err.code >= 500:
                raise _Transient(detail) from err
            raise JudgeError(f"judge at {self.url} refused the request: {detail}") from err
        except OSError as err:  # refused, reset, DNS, timeout: URLError and TimeoutError are OSErrors
            raise _Transient(f"{type(err).__name__}: {err}") from err
        try:
            return json.loads(raw)
        except ValueError as err:
            raise JudgeError(f"judge at {self.url} sent no JSON: {raw[:200]!r}") from err


def _reply_text(data: Any) -> str:
    """The assistant text of a chat-completions response."""
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as err:
        raise JudgeError(f"not a chat-completions response: {str(data)[:200]}") from err
    if not isinstance(content, str):
        raise JudgeError("the judge reply holds no text")
    return content
