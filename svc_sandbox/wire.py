"""Conversion between the sandbox's typed requests/results and their protobuf messages.

Both the server and the client (`svc_sandbox.client`, used by svc_reward) go through these two
functions each way, so the gRPC boundary cannot drift from the library's types.
"""
from __future__ import annotations

from m1flow.contracts import rpc
from svc_sandbox.limits import ExecRequest, ExecResult, ExecStatus, Limits

_LIMIT_FIELDS = ("cpu_seconds", "wall_seconds", "memory_bytes", "max_processes", "max_file_bytes",
                 "max_output_bytes")


def limits_to_proto(limits: Limits) -> rpc.Limits:
    return rpc.Limits(**{f: getattr(limits, f) for f in _LIMIT_FIELDS})


def limits_from_proto(msg: rpc.Limits) -> Limits:
    """Unset (zero) fields keep the library's defaults."""
    return Limits(**{f: getattr(msg, f) for f in _LIMIT_FIELDS if getattr(msg, f)})


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
                            cpu_seconds=res.cpu_seconds, detail=res.detail)


def result_from_proto(msg: rpc.ExecuteReply) -> ExecResult:
    return ExecResult(status=ExecStatus(msg.status), exit_code=msg.exit_code, signal=msg.signal or None,
                      stdout=msg.stdout, stderr=msg.stderr, wall_seconds=msg.wall_seconds,
                      cpu_seconds=msg.cpu_seconds, detail=msg.detail)
