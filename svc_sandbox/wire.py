"""Conversion of the sandbox's types to and from their protobuf messages, for the client and server.

Requests arrive through `svc_sandbox.validate` (every field checked against the server's caps);
everything else goes through these functions each way, so the gRPC boundary cannot drift from
the library's types. `network` is deliberately not on the wire: a caller cannot ask the service
for a route out, nor choose the uid its run gets.
"""
from __future__ import annotations

from m1flow.contracts import rpc
from m1flow.status import Status
from svc_sandbox.api import ExecRequest, ExecResult, Limits, RunTestsRequest, RunTestsResult
from svc_sandbox.validate import LIMIT_FIELDS


def limits_to_proto(limits: Limits) -> rpc.Limits:
    return rpc.Limits(**{f: getattr(limits, f) for f in LIMIT_FIELDS})


def request_to_proto(req: ExecRequest) -> rpc.ExecuteRequest:
    return rpc.ExecuteRequest(language=req.language, code=req.code, stdin=req.stdin, argv=req.argv,
                              files=[rpc.File(path=p, content=c) for p, c in req.files.items()],
                              limits=limits_to_proto(req.limits))


def result_to_proto(res: ExecResult) -> rpc.ExecuteReply:
    return rpc.ExecuteReply(status=res.status.value, exit_code=res.exit_code or 0, signal=res.signal or 0,
                            stdout=res.stdout, stderr=res.stderr, wall_seconds=res.wall_seconds,
                            cpu_seconds=res.cpu_seconds, memory_peak_bytes=res.memory_peak_bytes,
                            detail=res.detail)


def result_from_proto(msg: rpc.ExecuteReply) -> ExecResult:
    return ExecResult(status=Status(msg.status), exit_code=msg.exit_code, signal=msg.signal or None,
                      stdout=msg.stdout, stderr=msg.stderr, wall_seconds=msg.wall_seconds,
                      cpu_seconds=msg.cpu_seconds, memory_peak_bytes=msg.memory_peak_bytes,
                      detail=msg.detail)


def tests_request_to_proto(req: RunTestsRequest) -> rpc.RunTestsRequest:
    msg = rpc.RunTestsRequest(repo_tar=req.repo_tar, patch=req.patch, test_command=req.test_command,
                              fail_to_pass=req.fail_to_pass, pass_to_pass=req.pass_to_pass,
                              environment=req.environment)
    if req.limits is not None:
        msg.limits.CopyFrom(limits_to_proto(req.limits))
    return msg


def tests_result_to_proto(res: RunTestsResult) -> rpc.RunTestsReply:
    """Per-test statuses only: the grade is the caller's, from these statuses."""
    return rpc.RunTestsReply(status=res.status.value, patch_applied=res.patch_applied, apply_method=res.apply_method,
                             tests=[rpc.TestStatus(test_id=t, status=s) for t, s in res.tests.items()],
                             detail=res.detail, log=res.log.encode())


def tests_result_from_proto(msg: rpc.RunTestsReply) -> RunTestsResult:
    return RunTestsResult(status=Status(msg.status), patch_applied=msg.patch_applied, apply_method=msg.apply_method,
                          tests={t.test_id: t.status for t in msg.tests}, detail=msg.detail,
                          log=msg.log.decode("utf-8", errors="replace"))
