"""Caps on what one gRPC request may ask of a service (tokens to sample, samples, text to score):
a request over a cap is refused with INVALID_ARGUMENT naming the field, its value, the cap and the
setting that raises it, before any work starts. Never cut quietly: the caller learns what to change."""
from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import grpc


class Cap(NamedTuple):
    field: str  # as the request names it: `max_new_tokens`, `verifier.spec_json`
    value: int
    cap: int
    setting: str  # the service's setting that holds the cap: `generate.max_new_tokens`


def over(caps: Iterable[Cap]) -> str:
    """The refusal of the first value over its cap ('' when none is)."""
    for c in caps:
        if c.value > c.cap:
            return f"{c.field}: {c.value} is over the server's cap of {c.cap} (its setting {c.setting})"
    return ""


def enforce(context: grpc.ServicerContext, caps: Iterable[Cap]) -> None:
    """Abort the call with INVALID_ARGUMENT when a value is over its cap."""
    refusal = over(caps)
    if refusal:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal)
