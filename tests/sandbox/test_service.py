"""Hostile requests against the real svc_sandbox process over gRPC: refused by field, nothing leaked,
abandoned runs killed, a full queue refused.

One service (the local jail, 2 runs at once, 2 waiting, a 1 MB input cap) serves the module.
"""
from __future__ import annotations

import json
import math
import threading
import time
import uuid

import grpc
import psutil
import pytest

from m1flow.contracts import rpc, rpc_grpc
from ops.launcher import launch
from m1flow.status import Status
from svc_sandbox.api import InvalidRequest
from svc_sandbox.backends.jail import JailBackend
from svc_sandbox.client import ExecRequest, Limits, SandboxClient
from tests.sandbox.test_hostile import host_processes_with

INPUT_CAP = 1 << 20
SLEEPER = "import sys, time\ntime.sleep(60)"  # argv[1] is a token to find its processes by


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    if JailBackend.missing():
        pytest.skip(f"local jail unavailable here: missing {JailBackend.missing()}")
    caps = json.dumps({"input_bytes": INPUT_CAP})
    proc = launch("sandbox", tmp_path_factory.mktemp("sandbox"), bootstrap="unused:0",
                  args=["--backend", "jail", "--max-running", "2", "--max-waiting", "2", "--caps", caps])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def stub(service):
    channel = grpc.insecure_channel(service.grpc_address)
    yield rpc_grpc.SandboxServiceStub(channel)
    channel.close()


def execute(**fields) -> rpc.ExecuteRequest:
    fields.setdefault("code", "print(1)")
    return rpc.ExecuteRequest(**fields)


BAD_EXECUTE = [  # (request, the field the refusal must name)
    (execute(language="cobol"), "language"),
    (execute(argv=["x"] * 300), "argv"),
    (execute(argv=["ok", "nul\0byte"]), "argv[1]"),
    (execute(argv=["y" * 5000]), "argv[0]"),
    (execute(files=[rpc.File(path="nul\0name", content=b"x")]), "files[0].path"),
    (execute(files=[rpc.File(path="ok.txt"), rpc.File(path="n" * 300, content=b"x")]), "files[1].path"),
    (execute(files=[rpc.File(path="../escape")]), "files[0].path"),
    (execute(files=[rpc.File(path="/etc/passwd")]), "files[0].path"),
    (execute(files=[rpc.File(path="a"), rpc.File(path="a")]), "files[1].path"),
    (execute(files=[rpc.File(path=f"f{i}") for i in range(1001)]), "files"),
    (execute(stdin=b"x" * (INPUT_CAP + 1)), "input"),
    (execute(code="", files=[rpc.File(path="data.txt", content=b"1")]), "code"),
    (execute(limits=rpc.Limits(wall_seconds=math.inf)), "limits.wall_seconds"),
    (execute(limits=rpc.Limits(wall_seconds=math.nan)), "limits.wall_seconds"),
    (execute(limits=rpc.Limits(wall_seconds=-1)), "limits.wall_seconds"),
    (execute(limits=rpc.Limits(wall_seconds=1e300)), "limits.wall_seconds"),
    (execute(limits=rpc.Limits(cpu_seconds=math.inf)), "limits.cpu_seconds"),
    (execute(limits=rpc.Limits(cpu_seconds=1e9)), "limits.cpu_seconds"),
    (execute(limits=rpc.Limits(memory_bytes=2**63)), "limits.memory_bytes"),
    (execute(limits=rpc.Limits(max_output_bytes=1 << 40)), "limits.max_output_bytes"),
    (execute(limits=rpc.Limits(max_processes=1_000_000)), "limits.max_processes"),
    (execute(limits=rpc.Limits(max_open_files=2)), "limits.max_open_files"),
    (execute(limits=rpc.Limits(max_file_bytes=2**64 - 1)), "limits.max_file_bytes"),
    (execute(limits=rpc.Limits(work_dir_bytes=1 << 50)), "limits.work_dir_bytes"),
    (execute(limits=rpc.Limits(cpus=math.nan)), "limits.cpus"),
    (execute(limits=rpc.Limits(cpus=64)), "limits.cpus"),
]
BAD_RUN_TESTS = [
    (rpc.RunTestsRequest(repo_tar=b"x" * (INPUT_CAP + 1)), "input"),
    (rpc.RunTestsRequest(test_command="pytest\0-x"), "test_command"),
    (rpc.RunTestsRequest(fail_to_pass=["t"] * 10_001), "fail_to_pass"),
    (rpc.RunTestsRequest(pass_to_pass=["ok", "t\0"]), "pass_to_pass[1]"),
    (rpc.RunTestsRequest(limits=rpc.Limits(wall_seconds=math.inf)), "limits.wall_seconds"),
    (rpc.RunTestsRequest(limits=rpc.Limits(memory_bytes=1 << 40)), "limits.memory_bytes"),
]


BAD_REQUESTS = [("Execute", request, field) for request, field in BAD_EXECUTE] + [
    ("RunTests", request, field) for request, field in BAD_RUN_TESTS]


@pytest.mark.parametrize("method, request_, field", BAD_REQUESTS, ids=[f"{m}-{f}" for m, _, f in BAD_REQUESTS])
def test_a_bad_field_is_invalid_argument_naming_it(stub, method, request_, field):
    with pytest.raises(grpc.RpcError) as refused:
        getattr(stub, method)(request_, timeout=30)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith(f"{field}: "), refused.value.details()


def test_the_client_raises_the_callers_mistake_and_runs_good_requests(service):
    client = SandboxClient(service.grpc_address)
    try:
        with pytest.raises(InvalidRequest) as refused:
            client(ExecRequest(language="cobol", code="x"))
        assert refused.value.field == "language"
        result = client(ExecRequest(code="print(input()[::-1])", stdin=b"abc\n", limits=Limits(wall_seconds=10)))
        assert (result.status, result.stdout) == (Status.OK, b"cba\n"), result
    finally:
        client.close()


def service_footprint(service) -> tuple[int, int]:
    """Open descriptors and resident memory of the service process."""
    proc = psutil.Process(service.proc.pid)
    return proc.num_fds(), proc.memory_info().rss


def test_thousands_of_bad_requests_leak_neither_descriptors_nor_memory(service, stub):
    bad = [r for r, _ in BAD_EXECUTE if r.ByteSize() < 64 * 1024]
    for request in bad * 10:  # warm up: first-call allocations are not leaks
        with pytest.raises(grpc.RpcError):
            stub.Execute(request, timeout=30)
    fds, rss = service_footprint(service)
    for i in range(3000):
        with pytest.raises(grpc.RpcError):
            stub.Execute(bad[i % len(bad)], timeout=30)
    fds_after, rss_after = service_footprint(service)
    assert fds_after <= fds + 2, (fds, fds_after)
    assert rss_after - rss < 16 * 2**20, (rss, rss_after)


def wait_for(condition, timeout: float = 30.0) -> bool:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def sleeper(token: str) -> rpc.ExecuteRequest:
    return execute(code=SLEEPER, argv=[token], limits=rpc.Limits(wall_seconds=60, cpu_seconds=5))


def test_a_cancelled_call_and_a_passed_deadline_kill_the_run(stub):
    token = f"m1flow-cancel-{uuid.uuid4().hex}"
    call = stub.Execute.future(sleeper(token), timeout=120)
    assert wait_for(lambda: host_processes_with(token)), "the run never started"
    call.cancel()
    assert wait_for(lambda: not host_processes_with(token)), "a cancelled call's run outlived it"
    token = f"m1flow-deadline-{uuid.uuid4().hex}"
    with pytest.raises(grpc.RpcError) as expired:
        stub.Execute(sleeper(token), timeout=2)
    assert expired.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert wait_for(lambda: not host_processes_with(token)), "a run outlived its caller's deadline"


def test_a_full_queue_answers_resource_exhausted_and_frees_up_when_callers_leave(service, stub):
    """2 running + 2 waiting fill it: the fifth call is refused at once, whichever arrives last."""
    tokens = [f"m1flow-queue-{uuid.uuid4().hex}" for _ in range(5)]
    calls = [stub.Execute.future(sleeper(token), timeout=120) for token in tokens]
    try:
        assert wait_for(lambda: sum(call.done() for call in calls) == 1), "no call was refused"
        refused = [call for call in calls if call.done()]
        assert refused[0].exception().code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert wait_for(lambda: sum(bool(host_processes_with(token)) for token in tokens) == 2)
        patient = SandboxClient(service.grpc_address)  # told RESOURCE_EXHAUSTED, it asks again
        answered: list = []
        waiter = threading.Thread(target=lambda: answered.append(patient(ExecRequest(code="print(3)"))))
        waiter.start()
    finally:
        for call in calls:
            call.cancel()
    assert wait_for(lambda: not any(host_processes_with(token) for token in tokens))
    waiter.join(60)
    patient.close()
    assert answered and (answered[0].status, answered[0].stdout) == (Status.OK, b"3\n"), answered
    reply = stub.Execute(execute(code="print(2)"), timeout=60)  # nothing was left holding a slot
    assert (reply.status, reply.stdout) == (Status.OK, b"2\n")
