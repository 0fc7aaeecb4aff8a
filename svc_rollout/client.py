"""For other processes: sample from the policy a rollout replica holds, over its gRPC Generate."""
from __future__ import annotations

import grpc

from m1flow.contracts import rpc, rpc_grpc
from m1flow.security import grpc_tls as tls
from m1flow.engines import ENGINES, known_engine  # noqa: F401 - `--engine` names for the operator
from m1flow.trace.ids import group_id_for  # noqa: F401 - the group id, for the operator (ops/profile.py)

ENGINE_NAMES: tuple[str, ...] = ENGINES.names()  # what `--engine` accepts (m1flow up, the demo, bench)


def generate(address: str, prompt: str, n: int = 1, max_new_tokens: int = 0, temperature: float = 0.0,
             top_p: float = 0.0, seed: int = 0, timeout: float = 120.0) -> list[rpc.GeneratedSample]:
    """n samples of one prompt (0 for a setting: the service's own), each tagged with its policy version."""
    with tls.channel(address) as channel:
        request = rpc.GenerateRequest(prompt=prompt, n=n, max_new_tokens=max_new_tokens, temperature=temperature,
                                      top_p=top_p, seed=seed)
        return list(rpc_grpc.RolloutServiceStub(channel).Generate(request, timeout=timeout))
