"""Conversion between the sandbox's typed requests/results and their protobuf messages.

Both the server and the client (`svc_sandbox.client`, used by svc_reward) go through these
functions each way, so the gRPC boundary cannot drift from the library's types. `network` and
`uid` are deliberately not on the wire: a caller cannot ask the service for a route out or root.
"""
from __future__ import annotations

from m1flow.contracts import rpc
from svc_sandbox.limits import ExecRequest, ExecResult, ExecStatus, Limits
from svc_sandbox.swe import RunTestsRequest, RunTestsResult, swe_limits

_LIMIT_FIELDS = ("cpu_seconds", "wall_seconds", "memory_bytes", "max_processes", "max_file_bytes",
                 "max_output_bytes", "max_open_files", "work_dir_bytes", "cpus")


def limits_to_proto(limits: Limits) -> rpc.Limits:
    return rpc.Limits(**{f: getattr(limits, f) for f in _LIMIT_FIELDS})


def limits_from_proto(msg: rpc.Limits, base: Limits | None = None) -> Limits:
    """Unset (zero) fields keep `base`'s values (default: the library's defaults)."""
    given = {f: getattr(msg, f) for f in _LIMIT_FIELDS if getattr(msg, f)}
    return Limits(**{**(base.model_dump() if base else {}), **given})


def request_to_proto(req: ExecRequest) -> rpc.ExecuteRequest:
    return rpc.ExecuteRequest(language=req.language, code=req.code, stdin=req.stdin, argv=req.argv,
                              files=[rpc.File(path=p, content=c) for p, c in req.files.items()],
                              limits=limits_to_proto(req.limits))


def request_from_proto(msg: rpc.ExecuteRequest) -> ExecRequest:
    return ExecRequest(language=msg.language or "python", code=msg.code, stdin=msg.stdin,
                       argv=list(msg.argv), files={f.path: f.content for f in msg.files},
                       limits=limits_from_proto(msg.limits))


def result_to_proto(res: ExecResult) -> rpc.ExecuteReply:
    return rpc.ExecuteReply(status=res.status.value, exit_code=res.exit_code or 0, signal=res.signal or 0,
                            stdout=res.stdout, stderr=res.stderr, wall_seconds=res.wall_seconds,
                            cpu_seconds=res.cpu_seconds, memory_peak_bytes=res.memory_peak_bytes,
                            detail=res.detail)


def result_from_proto(msg: rpc.ExecuteReply) -> ExecResult:
    return ExecResult(status=ExecStatus(msg.status), exit_code=msg.exit_code, signal=msg.signal or None,
                      stdout=msg.stdout, stderr=msg.stderr, wall_seconds=msg.wall_seconds,
                      cpu_seconds=msg.cpu_seconds, memory_peak_bytes=msg.memory_peak_bytes,
                      detail=msg.detail)


def tests_request_to_proto(req: RunTestsRequest) -> rpc.RunTestsRequest:
    msg = rpc.RunTestsRequest(repo_tar=req.repo_tar, patch=req.patch, test_command=req.test_command,
                              fail_to_pass=req.fail_to_pass, pass_to_pass=req.pass_to_pass)
    if req.limits is not None:
        msg.limits.CopyFrom(limits_to_proto(req.limits))
    return msg


def tests_request_from_proto(msg: rpc.RunTestsRequest) -> RunTestsRequest:
    """Unset limits (or unset fields of them) are the SWE defaults, not the contest-program ones."""
    limits = limits_from_proto(msg.limits, base=swe_limits()) if msg.HasField("limits") else None
    request = RunTestsRequest(repo_tar=msg.repo_tar, patch=msg.patch, fail_to_pass=list(msg.fail_to_pass),
                              pass_to_pass=list(msg.pass_to_pass), limits=limits)
    if msg.test_command:
        request.test_command = msg.test_command
    return request


def tests_result_to_proto(res: RunTestsResult) -> rpc.RunTestsReply:
    """Per-test statuses only: the grade (resolution, reward) is the caller's, from these statuses."""
    return rpc.RunTestsReply(status=res.status, patch_applied=res.patch_applied, apply_method=res.apply_method,
                             tests=[rpc.TestStatus(test_id=t, status=s) for t, s in res.tests.items()],
                             detail=res.detail, log=res.log.encode())


def tests_result_from_proto(msg: rpc.RunTestsReply) -> RunTestsResult:
    return RunTestsResult(status=msg.status, patch_applied=msg.patch_applied, apply_method=msg.apply_method,
                          tests={t.test_id: t.status for t in msg.tests}, detail=msg.detail,
                          log=msg.log.decode("utf-8", errors="replace"))
