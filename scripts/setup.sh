#!/usr/bin/env bash
# Everything `make demo` and `make test` need, set up side by side: the steps below do not depend on
# each other (apt is serialised by scripts/apt_install.sh; Kafka's jars by their own lock), so they run
# at the same time and the slowest one sets the wall time. Each step logs to $CACHE/logs/setup-<step>.log;
# one line per step says how long it took, and a step that fails prints its log's tail and fails the set-up.
#
#   scripts/setup.sh            system packages, the venv (+ generated protobuf code), Kafka's jars
#   scripts/setup.sh --docker   the same, plus a Docker engine, the base images and the sandbox's run image
#                               (a machine that cannot run an engine goes on without: those tests skip)
#
# The long compiles (Compose, s3s-fs, the Kubernetes tier) are not here: scripts/test.sh starts them in
# the background, and the tests that need them wait for their locks.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CACHE=${M1FLOW_CACHE:-$HOME/.cache/m1flow}
LOGS=$CACHE/logs
mkdir -p "$LOGS"
docker=0
[ "${1:-}" = --docker ] && docker=1

python_env() {
  local venv
  venv=$(bash scripts/env.sh)
  PYTHONPATH=$ROOT "$venv/bin/python" -m m1flow.protogen
}

docker_all() {
  local rc=0
  bash scripts/docker_engine.sh engine || rc=$?
  [ $rc -eq 0 ] || return $rc
  local base
  base=$(bash scripts/docker_images.sh | sed -n 's/^M1FLOW_SANDBOX_BASE=//p') || return $?
  M1FLOW_SANDBOX_BASE=$base bash scripts/sandbox_image.sh >/dev/null
}

set -m  # each step in its own process group, so a stop reaches its children (pip, apt, docker build)
declare -A pids started
run_step() {  # run_step NAME FUNCTION-OR-COMMAND...: in the background, logged
  local name=$1; shift
  started[$name]=$SECONDS
  ( "$@" ) >"$LOGS/setup-$name.log" 2>&1 </dev/null &
  pids[$name]=$!
}
stop_steps() { for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done; }
trap stop_steps EXIT

run_step system bash -c 'bash scripts/system_deps.sh && bash scripts/monitor_deps.sh'
run_step python python_env
run_step kafka bash scripts/kafka_jars.sh
[ $docker -eq 1 ] && run_step docker docker_all

failed=0
for name in "${!pids[@]}"; do
  rc=0
  wait "${pids[$name]}" || rc=$?
  took=$((SECONDS - started[$name]))
  if [ $rc -eq 0 ]; then
    echo "setup: $name ready in ${took} s" >&2
  elif [ "$name" = docker ] && [ $rc -eq 3 ]; then  # no engine can run here: those tests skip, saying so
    echo "setup: docker unavailable here ($(tail -n 1 "$LOGS/setup-$name.log")); its tests will skip" >&2
  else
    echo "setup: $name failed (exit $rc) after ${took} s; the end of $LOGS/setup-$name.log:" >&2
    tail -n 30 "$LOGS/setup-$name.log" >&2
    failed=1
  fi
done
trap - EXIT
exit $failed
