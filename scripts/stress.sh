#!/usr/bin/env bash
# One stressed run of the sandbox, bus and integration tiers (chaos aside) from a clean clone of this
# checkout's HEAD, through scripts/test.sh (make test's own set-up and pytest invocation), beside
# `stress-ng --cpu 2`: the suite's "no test that can fail by chance" check (README "Tests").
# usage: scripts/stress.sh N   (log: /tmp/stress-N.log; one line of result on stdout)
set -u
N=${1:?usage: scripts/stress.sh N}
command -v stress-ng >/dev/null || { echo "stress-ng is not installed (apt-get install stress-ng): no stress, no run" >&2; exit 2; }
SRC=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
DIR=/tmp/stress-$N
rm -rf "$DIR" && git clone -q "$SRC" "$DIR" && cd "$DIR" || exit 2
stress-ng --cpu 2 --timeout 7200 >/dev/null 2>&1 &
STRESS=$!
trap 'kill $STRESS 2>/dev/null' EXIT
sleep 2
kill -0 $STRESS 2>/dev/null || { echo "stress-ng did not start" >&2; exit 2; }
start=$(date +%s)
echo "run $N tree $(git rev-parse --short HEAD) start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
PYTEST_ARGS="tests/sandbox tests/bus tests/integration --ignore=tests/integration/test_chaos.py" \
  timeout 3600 bash scripts/test.sh >"/tmp/stress-$N.log" 2>&1
rc=$?
echo "run $N rc $rc $(( ($(date +%s) - start) / 60 )) min end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) :: $(tail -1 "/tmp/stress-$N.log")"
exit $rc
