#!/usr/bin/env bash
# One call on a GPU node (an H200 with torch and Triton; no vLLM needed): the learner step and the
# native decoding on CUDA (bench/cuda_learner_decode.py), the lightning attention benchmark
# (bench/lightning_attn.py), and the lightning attention kernels' float64 checks on CUDA
# (tests/kernels: every backend against the float64 recurrence; they run on CUDA when it is there).
# Each part prints its table; a part that fails is reported and the others still run.
#
#   bash bench/gpu_check.sh [--quick]        # from the repository root; PYTHON=... to pick the interpreter
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
QUICK=${1:-}
export PYTHONPATH=.
failed=()

part() {  # part NAME COMMAND...
  local name=$1; shift
  echo; echo "=== $name: $*"; local started=$SECONDS
  if "$@"; then echo "=== $name: ok ($((SECONDS - started)) s)"; else echo "=== $name: FAILED ($((SECONDS - started)) s)"; failed+=("$name"); fi
}

part environment "$PY" -c "
import importlib, torch
print('torch', torch.__version__, '| CUDA', torch.version.cuda, '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')
for name in ('triton', 'transformers', 'safetensors', 'pydantic', 'pytest', 'fla', 'flash_attn'):
    try:
        print(f'{name:13s}', getattr(importlib.import_module(name), '__version__', 'present'))
    except ImportError as exc:
        print(f'{name:13s} missing ({exc})')
assert torch.cuda.is_available(), 'no CUDA device'
"
part learner-and-decoding "$PY" bench/cuda_learner_decode.py --device cuda $QUICK
part lightning-attention "$PY" bench/lightning_attn.py $QUICK
part kernel-float64-checks "$PY" -m pytest -q -p no:cacheprovider tests/kernels -rs

echo
if [ ${#failed[@]} -eq 0 ]; then echo "gpu_check: all parts passed"; else echo "gpu_check: FAILED parts: ${failed[*]}"; exit 1; fi
