#!/usr/bin/env bash
# `make test`: everything the tests need, then pytest (README "Tests": the tiers and their minutes).
#
# 1. The long compiles start first, in the background at the lowest priority: Compose (Go, ~2 min on 2
#    cores), s3s-fs (Rust, ~4 min) and the Kubernetes tier (Go, 15 to 20 min cold; seconds once cached
#    under ~/.cache/m1flow). The tests that need them call the same scripts, which wait on the build's
#    lock, and those tiers run last (tests/conftest.py), so a cold machine pays for them mostly in the
#    other tiers' idle time.
# 2. The set-up steps run side by side (scripts/setup.sh --docker): apt, the venv, Kafka's jars, the
#    Docker engine and images.
# 3. pytest, in M1FLOW_TEST_WORKERS xdist workers (default 3: most tiers wait on brokers, processes and
#    timeouts more than they compute; README "Tests" has the measurements), grouped by tests/conftest.py.
# Whatever way this script ends, a build still running is stopped (a rerun resumes from the caches).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CACHE=${M1FLOW_CACHE:-$HOME/.cache/m1flow}
LOGS=$CACHE/logs
mkdir -p "$LOGS"

declare -A builds
build() {  # build NAME COMMAND...: a compile in the background, in its own session (stopped as a group)
  local name=$1; shift
  # A new session is a new scheduler autogroup (kernel.sched_autogroup_enabled=1 here), and a process's
  # nice counts only inside its autogroup: the group itself is niced too, or the compile takes an equal
  # share of the cores from pytest (measured: rustc at nice 19 in its own group at nice 0).
  setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' build "$@" \
    >"$LOGS/build-$name.log" 2>&1 </dev/null &
  builds[$name]=$!
}
stop_builds() {
  local pid
  for pid in "${builds[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      echo "test.sh: stopping a background build still running (logs: $LOGS/build-*.log)" >&2
      kill -TERM -- "-$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
}
trap stop_builds EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

build compose bash scripts/docker_engine.sh compose
build s3 bash scripts/s3_server.sh build
build k8s bash scripts/k8s_local.sh build crds
echo "test.sh: Compose, s3s-fs and the Kubernetes tier building in the background (logs: $LOGS/build-*.log)" >&2

bash scripts/setup.sh --docker
echo "test.sh: set-up done after ${SECONDS} s" >&2

# The tiers whose tools are still compiling go last (tests/conftest.py).
M1FLOW_BUILDING=""
for name in "${!builds[@]}"; do
  if kill -0 "${builds[$name]}" 2>/dev/null; then M1FLOW_BUILDING="$M1FLOW_BUILDING $name"; fi
done
export M1FLOW_BUILDING
[ -z "$M1FLOW_BUILDING" ] || echo "test.sh: still building:$M1FLOW_BUILDING (their tiers run last)" >&2

VENV=$(bash scripts/env.sh)
# The default warm-started policy (about 1 CPU-minute; cached, so seconds on a rerun), trained before the
# tests: beside three workers it took over 10 minutes once, and a stack waiting on it timed out.
PYTHONPATH=$ROOT "$VENV/bin/python" -m ops.warmstart >"$LOGS/warmstart.log" 2>&1 </dev/null
echo "test.sh: warm start ready after ${SECONDS} s" >&2
export M1FLOW_SANDBOX_BASE="${M1FLOW_SANDBOX_BASE:-$(bash scripts/docker_images.sh 2>/dev/null | sed -n 's/^M1FLOW_SANDBOX_BASE=//p')}"
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words by design (make test PYTEST_ARGS="-x tests/rl")
WORKERS=${M1FLOW_TEST_WORKERS:-3}
XDIST=()
[ "$WORKERS" -gt 0 ] && XDIST=(-n "$WORKERS" --dist loadscope --no-loadscope-reorder)
PYTHONPATH=$ROOT "$VENV/bin/python" -m pytest -q -p no:cacheprovider "${XDIST[@]}" ${PYTEST_ARGS:-}
