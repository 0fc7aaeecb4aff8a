"""Compile the Triton kernels for an H100/H200 (sm_90) without a GPU, exactly as they are launched.

The interpreter runs kernel bodies as Python and misses what only the compiler checks (types of
loop-carried values, constexpr branches, layouts, what ptxas accepts). Run in a process where
TRITON_INTERPRET is unset: `PYTHONPATH=. python tests/kernels/la_compile_sm90.py`.
"""
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels.lightning_attn.chunk_triton import _walk_kernel, interpreting, walk_config
from kernels.lightning_attn.decode_triton import _decode_kernel, decode_config

TARGET = GPUTarget("cuda", 90, 32)
TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def compile_kernel(kernel, pointers: dict[str, str], constexprs: dict, options: dict) -> None:
    signature = {name: "constexpr" if name in constexprs else pointers[name]
                 for name in kernel.arg_names}
    compiled = triton.compile(ASTSource(kernel, signature, constexprs), target=TARGET,
                              options=options)
    assert compiled.asm["cubin"], "no cubin produced"


def main() -> None:
    if interpreting():
        sys.exit("unset TRITON_INTERPRET: the interpreter replaces the compiler")
    for dtype, reverse in [(torch.bfloat16, False), (torch.bfloat16, True), (torch.float32, False)]:
        data = TYPES[dtype]
        pointers = dict(q=f"*{data}", k=f"*{data}", v=f"*{data}", out=f"*{data}", slope="*fp32",
                        state_in="*fp32", state_out="*fp32", cu_seqlens="*i32")
        for heads in (64, 16):
            _, constexprs, options = walk_config(1, heads, 128, 128, dtype, torch.device("cpu"),
                                                 True, True, reverse)
            compile_kernel(_walk_kernel, pointers, constexprs, options)
            print(f"walk {data} reverse={reverse} {constexprs['BV']=}: ok", flush=True)
    for batch in (1, 256):
        _, constexprs, options = decode_config(batch, 64, 128, 128)
        pointers = dict(q="*bf16", k="*bf16", v="*bf16", o="*bf16", slope="*fp32",
                        state="*fp32", slot_ids="*i32")
        compile_kernel(_decode_kernel, pointers, constexprs, options)
        print(f"decode B{batch} {constexprs['BV']=}: ok", flush=True)


if __name__ == "__main__":
    main()
