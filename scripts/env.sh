#!/usr/bin/env bash
# Create (once) the project's Python virtual environment, cached outside the checkout and keyed by
# the hash of requirements.txt, then print its path. Idempotent: a second call takes milliseconds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${M1FLOW_CACHE:-$HOME/.cache/m1flow}"
python="${M1FLOW_PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
hash="$(sha256sum "$here/requirements.txt" | cut -c1-12)"
venv="$cache/venv-$hash"
if [ ! -f "$venv/.complete" ]; then
  mkdir -p "$cache"
  lock="$cache/.venv.lock"
  exec 9>"$lock"
  flock 9
  if [ ! -f "$venv/.complete" ]; then
    echo "m1flow: creating virtual environment $venv (first run only; torch is a large download)" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip >&2
    "$venv/bin/pip" install -q --progress-bar off -r "$here/requirements.txt" >&2
    touch "$venv/.complete"
  fi
fi
echo "$venv"
