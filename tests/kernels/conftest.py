"""Lightning attention tests: Triton kernels run on CPU through the interpreter when no GPU is here.

The interpreter is chosen when a kernel is decorated, so the variable must be set before
kernels.lightning_attn.chunk_triton / decode_triton are first imported (they are imported lazily).
"""
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from la_testing import triton_usable  # noqa: E402


@pytest.fixture
def use_backend(monkeypatch):
    """Force a backend through the environment variable the API reads at each call."""
    def set_backend(name: str) -> None:
        if name == "triton" and not triton_usable():
            pytest.skip("triton not installed")
        monkeypatch.setenv("M1FLOW_LA_BACKEND", name)
    return set_backend
