"""The generated protobuf/gRPC modules, importable from one place.

Generation happens on first import when proto/ changed (see m1flow.protogen), so every entry point
(`python -m svc_x`, tests, the CLI) sees code that matches the contracts.
"""
from m1flow import protogen

if protogen.is_stale():
    protogen.generate()

from m1flow.v1 import events_pb2 as events  # noqa: E402
from m1flow.v1 import services_pb2 as rpc  # noqa: E402
from m1flow.v1 import services_pb2_grpc as rpc_grpc  # noqa: E402

__all__ = ["events", "rpc", "rpc_grpc"]
