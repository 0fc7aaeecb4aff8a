#!/usr/bin/env bash
# The SWE factory's full run: fetch real projects' source distributions from PyPI, make SWE-bench
# instances from them (`m1flow data swe-make`), and validate every instance through the sandbox path a
# rollout takes (`m1flow data validate`: the gold scores 1, the empty patch 0). Not a test: it takes
# minutes per project. The projects and their licences (permissive, recorded in each instance):
#   more-itertools 10.5.0 (MIT), toolz 1.0.0 (New BSD, as its PKG-INFO says)
#
# Usage: scripts/swe_factory.sh [OUT_DIR] [MAX_MUTATIONS] [SEED]     (default run/swe, 50, 0)
# Prints per project: instances kept per mutation tried and per CPU-minute, and why the rest were dropped.
# Measured 2026-12-05 (2 shared cores, load ~10; 20 mutations, seed 7): more-itertools 18/20 kept, 6.2 per
# CPU-minute; toolz 17/20, 22.5 per CPU-minute; validate: 35 of 35 good.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-run/swe}
max=${2:-50}
seed=${3:-0}
python=${PYTHON:-python}
mkdir -p "$out/sdists"
projects=("more-itertools==10.5.0" "toolz==1.0.0")
for spec in "${projects[@]}"; do
  "$python" -m pip download --quiet --no-deps --no-binary :all: "$spec" -d "$out/sdists"
done
"$python" -m ops data swe-make "$out"/sdists/*.tar.gz --out "$out/instances.jsonl" --task-store "$out/tasks" \
  --max-mutations "$max" --seed "$seed"
"$python" -m ops data validate "$out/instances.jsonl" --task-store "$out/tasks"
