#!/usr/bin/env bash
# `make test`: everything the tests need, then pytest. The Kubernetes tier's cold build (15 to 20 min
# of compiling on 2 cores, seconds once cached) runs in the background, niced, while the other tiers
# run; tests/k8s runs last (tests/conftest.py) and its fixture's own `build crds` waits on the
# build's lock, so a cold machine pays for the build once and mostly in the other tiers' idle time.
# The build starts after `setup docker` because those install Debian packages too (one apt at a time).
# Whatever way this script ends, a build still running is stopped (a rerun resumes from Go's cache).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CACHE=${M1FLOW_CACHE:-$HOME/.cache/m1flow}

make --no-print-directory setup docker

mkdir -p "$CACHE"
BUILD_LOG=$CACHE/k8s-build.log
setsid bash scripts/k8s_local.sh build crds >"$BUILD_LOG" 2>&1 </dev/null &
BUILD_PID=$!
stop_build() {
  if kill -0 "$BUILD_PID" 2>/dev/null; then
    echo "test.sh: stopping the background Kubernetes build (log: $BUILD_LOG)" >&2
    kill -TERM -- "-$BUILD_PID" 2>/dev/null || true
  fi
  wait "$BUILD_PID" 2>/dev/null || true
}
trap stop_build EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo "test.sh: Kubernetes tier building in the background (log: $BUILD_LOG)" >&2

make --no-print-directory s3

VENV=$(bash scripts/env.sh)
export M1FLOW_SANDBOX_BASE="${M1FLOW_SANDBOX_BASE:-$(bash scripts/docker_images.sh 2>/dev/null | sed -n 's/^M1FLOW_SANDBOX_BASE=//p')}"
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words by design (make test PYTEST_ARGS="-x tests/rl")
PYTHONPATH=$ROOT "$VENV/bin/python" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-}
