"""Lightning attention of MiniMax-M1: chunked and recurrent kernels with a PyTorch reference.

naive.py         the token-by-token recurrence (reference) and the PyTorch decode step
chunk.py         chunked PyTorch prefill (CPU path, autograd)
chunk_triton.py  Triton chunked prefill, forward and backward
decode_triton.py Triton decode step on slot-addressed fp32 states
"""
from .api import lightning_attn, lightning_attn_decode, select_backend
from .chunk import chunk_lightning_attn
from .naive import naive_decode, naive_lightning_attn
from .slopes import base_slopes, build_slopes

__all__ = ["lightning_attn", "lightning_attn_decode", "select_backend", "chunk_lightning_attn",
           "naive_lightning_attn", "naive_decode", "base_slopes", "build_slopes"]
