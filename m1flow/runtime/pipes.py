"""A worker program of our own, started with two pipes: requests go down one, answers come up the other.

Why a program and not a multiprocessing target: `spawn` and `forkserver` re-run the caller's main
module in the child (a plain script without an `if __name__ == "__main__":` guard, a notebook or a
service broke), and `fork` copies a threaded service. So the worker is a command line of its own that
gets the two descriptors as arguments (svc_reward's math-verify workers, svc_source's reader). Its
first message says it is ready; a worker that does not say so in time is killed. The worker exits
when its requests pipe closes (EOF), and should also watch for its parent's death (a SIGKILL closes
nothing in time to matter to a busy worker).
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])  # the checkout: a worker started by path finds m1flow here


class WorkerGone(RuntimeError):
    """The worker did not start, or its pipe broke."""


def with_checkout_on_path(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment with the checkout first on PYTHONPATH (a worker run by path does not see the caller's cwd)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


class PipeWorker:
    """The caller's side of one worker: `send` a request, `poll` and `recv` its answer, `close` it.

    argv(requests_fd, answers_fd): the command line, given the child's ends of the two pipes.
    ready: the worker's first message. setup: a first request it reads before it is ready (what to
    open). gone: the error raised when `ready` does not come within startup_timeout_s.
    """

    def __init__(self, argv: Callable[[int, int], list[str]], ready: bytes, startup_timeout_s: float,
                 what: str, env: Mapping[str, str] | None = None, quiet: bool = False,
                 setup: bytes | None = None, gone: type[RuntimeError] = WorkerGone) -> None:
        self.what = what
        requests_r, requests_w = os.pipe()
        answers_r, answers_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                argv(requests_r, answers_w), pass_fds=(requests_r, answers_w), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL if quiet else None, close_fds=True, env=env)
        except BaseException:
            for fd in (requests_r, requests_w, answers_r, answers_w):
                os.close(fd)
            raise
        os.close(requests_r)
        os.close(answers_w)
        self.requests = Connection(requests_w, readable=False)
        self.answers = Connection(answers_r, writable=False)
        try:
            if setup is not None:
                self.requests.send_bytes(setup)
            started = self.answers.poll(startup_timeout_s) and self.answers.recv_bytes() == ready
        except (EOFError, OSError):
            started = False
        if not started:
            self.kill()
            raise gone(f"{what} did not start")

    def send(self, request: bytes) -> None:
        self.requests.send_bytes(request)

    def poll(self, timeout_s: float) -> bool:
        """An answer is there to `recv` (False: none came within timeout_s)."""
        return self.answers.poll(timeout_s)

    def recv(self) -> bytes:
        """The next answer (EOFError or OSError: the worker is gone)."""
        return self.answers.recv_bytes()

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, timeout_s: float = 5.0) -> None:
        """Close the requests pipe (the worker's EOF: it exits), then wait for it; kill it if it does not."""
        self._close_pipes()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        """Stop it now (a worker past its deadline may be stuck in a computation)."""
        self.process.kill()
        self.process.wait(5)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for conn in (self.requests, self.answers):
            conn.close()
