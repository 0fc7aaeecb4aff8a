"""What other processes use of svc_monitor: its Report over gRPC, and where a local one listens."""
from __future__ import annotations

import json
from pathlib import Path

import grpc

from m1flow.contracts import rpc, rpc_grpc
from m1flow.security import grpc_tls as tls
from m1flow.runtime.service import ready_file
from svc_monitor.access import TOKEN_FILE, client_metadata

__all__ = ["TOKEN_FILE", "local_address", "report"]  # TOKEN_FILE: the token's file name under a run directory


def report(address: str, max_events: int = 0, timeout: float = 10.0, token: str | None = None) -> rpc.MonitorReport:
    """`token`: what a monitor listening beyond loopback requires (default: $M1FLOW_ACCESS_TOKEN)."""
    with tls.channel(address) as channel:
        return rpc_grpc.MonitorServiceStub(channel).Report(rpc.ReportRequest(max_events=max_events), timeout=timeout,
                                                          metadata=client_metadata(token))


def local_address(run_dir: Path, replica: int = 0) -> str:
    """The gRPC address of the monitor a local stack (`m1flow up`, the demo) started under `run_dir`."""
    path = ready_file(run_dir, "monitor", replica)
    if not path.exists():
        raise FileNotFoundError(f"no running monitor under {run_dir} ({path} missing); start one with "
                                f"`m1flow up`, or pass --monitor HOST:PORT")
    return json.loads(path.read_text())["grpc"]
