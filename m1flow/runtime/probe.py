"""A health probe for a service whose gRPC port asks for a client certificate.

The kubelet's native `grpc:` probe and a plain healthcheck speak plaintext, and a mutual-TLS server
refuses them; this probe runs inside the service's own container (a Kubernetes exec probe, a compose
`CMD` healthcheck) with the service's own identity, read from `M1FLOW_SECURITY` as the service reads
it, and exits 0 only when the named health service answers SERVING:

    python -m m1flow.runtime.probe --address localhost:50051 --service m1flow.v1.RewardService
"""
from __future__ import annotations

import argparse
import sys

from m1flow.runtime.health import check
from m1flow.security.config import from_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m m1flow.runtime.probe", description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="localhost:50051", help="host:port of the gRPC server")
    parser.add_argument("--service", default="", help="the grpc.health.v1 service name ('' = the server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds for the answer")
    args = parser.parse_args(argv)
    answer = check(args.address, args.timeout, from_env(), args.service)
    print(answer)
    return 0 if answer == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
