#!/usr/bin/env bash
# The SWE factory's full run, the shipped set: fetch real projects' source distributions from PyPI, make
# SWE-bench instances from them (`m1flow data swe-make`, each project in its own environment, --envs),
# and validate every instance through the sandbox path a rollout takes (`m1flow data validate`: the gold
# scores 1, the empty patch 0), each project as soon as it is made. Not a test: tens of CPU-minutes.
# The projects (pinned), their licences as their PKG-INFO says (also in each instance and in the set's
# LICENSES), the mutations tried, and (measured 2026-12-06) the instances kept:
#   more-itertools 10.5.0 (MIT License, 30: 26)   toolz 1.0.0 (BSD, 60: 52)       inflection 0.5.1 (MIT, 22 = all: 6)
#   sqlparse 0.5.2 (BSD License, 90: 38)   parse 1.20.2 (MIT License, 69 = all: 36)   idna 3.10 (BSD License, 120: 5)
#   six 1.16.0 (MIT, 44 = all: 12)   tabulate 0.9.0 (MIT, 90: 38)   jmespath 1.0.1 (MIT, 70: 41)
#   simplejson 3.19.3 (MIT License, 55 = all: 25)   pycparser 2.22 (BSD-3-Clause, 60: 18)   pyflakes 3.2.0 (MIT, 40: 21)
# 318 instances of 750 mutations tried (0.42 per mutation), 38.7 CPU-minutes of making (8.2 kept per CPU-minute),
# all 318 validated good. Most drops are "too many tests failed" (a bug more than 10 tests catch); idna's
# are "no test failed" (its uts46data tables run at import, no test checks them).
# Each is a flat-layout project whose suite runs under pytest with nothing beyond pytest (a src/ layout
# tests an installed copy, not the mutated tree: cachetools was refused for it; boltons' conftest does
# not load under pytest 9; wcwidth needs pytest-cov; sortedcontainers' sdist has no tests).
#
# Usage: scripts/swe_factory.sh [--print-dir] [SEED]   (default 0; env: PYTHON, M1FLOW_CACHE, JOBS=2
# projects at once; --print-dir: only print the set's folder, built or not)
# The set goes to $M1FLOW_CACHE/swe-set-<key>/ (default ~/.cache/m1flow), the key a hash of the projects,
# versions, mutations tried, seed and FORMAT (bump it when the factory's output changes), so another set
# never reads as this one. In it: instances.jsonl, tasks/ (the snapshots; payload_uri names them by
# absolute path: the set is used where it was built), envs/, LICENSES (project, version, licence, from
# the instances), stats.txt (per project: kept per mutation tried and per CPU-minute, why the rest were
# dropped), validate.txt, and COMPLETE, written last: a set without it is unfinished (a rerun goes on
# from the projects already made or validated, parts/) and is never used. With COMPLETE there, a run
# prints the folder and returns. A project made and validated with the same inputs by another set is
# carried from it (m1flow/data/swe_factory/shipped.py), not made again. The last line printed is the folder.
# Measured 2026-12-06: bench/README.md, "SWE grading rate" (per project, and the grading rate).
set -euo pipefail
cd "$(dirname "$0")/.."
print_only=""
[[ ${1:-} == --print-dir ]] && { print_only=1; shift; }
seed=${1:-0}
python=${PYTHON:-python}
jobs=${JOBS:-2}
FORMAT=1
projects=("more-itertools==10.5.0 30" "toolz==1.0.0 60" "inflection==0.5.1 22" "sqlparse==0.5.2 90"
          "parse==1.20.2 69" "idna==3.10 120" "six==1.16.0 44" "tabulate==0.9.0 90" "jmespath==1.0.1 70"
          "simplejson==3.19.3 80" "pycparser==2.22 60" "pyflakes==3.2.0 40")
key=$(printf '%s\n' "${projects[@]}" "seed=$seed" "format=$FORMAT" | sha256sum | cut -c1-12)
cache=${M1FLOW_CACHE:-$HOME/.cache/m1flow}
set_dir=$cache/swe-set-$key
if [[ -n $print_only || -f "$set_dir/COMPLETE" ]]; then
  echo "$set_dir"
  exit 0
fi
mkdir -p "$set_dir/sdists" "$set_dir/parts"
exec 9>"$set_dir/.lock"
flock 9  # one build of a set at a time; a second waits, then finds it complete
if [[ -f "$set_dir/COMPLETE" ]]; then
  echo "$set_dir"
  exit 0
fi

make_part() {  # SPEC MAX: one project's instances made (parts/NAME.made.jsonl), then validated (parts/NAME.jsonl)
  local spec=$1 max=$2 name=${1%%==*} version=${1##*==}
  local made="$set_dir/parts/$name.made.jsonl" log="$set_dir/parts/$name.log"
  local inputs="$spec $max seed=$seed format=$FORMAT"
  [[ -f "$set_dir/parts/$name.jsonl" ]] && return 0
  # made and validated with the same inputs by another set: carried (snapshots, environment, result)
  "$python" -m m1flow.data.swe_factory.shipped "$cache" "$set_dir" "$name" "$inputs" && return 0
  echo "$inputs" >"$set_dir/parts/$name.inputs"
  if [[ ! -f "$made" ]]; then  # a made file is whole: written under another name, then renamed
    "$python" -m pip download --quiet --no-deps --no-binary :all: "$spec" -d "$set_dir/sdists"
    "$python" -m ops data swe-make "$set_dir/sdists/$name-$version.tar.gz" --out "$made.tmp" --task-store \
      "$set_dir/tasks" --envs "$set_dir/envs" --max-mutations "$max" --seed "$seed" >"$log" 2>&1 ||
      { cat "$log" >&2; return 1; }
    mv "$made.tmp" "$made"
  fi
  "$python" -m ops data validate "$made" --format jsonl --task-store "$set_dir/tasks" --envs "$set_dir/envs" \
    >"$set_dir/parts/$name.validate" 2>"$log.validate" ||
    { cat "$set_dir/parts/$name.validate" >&2; tail -5 "$log.validate" >&2; return 1; }
  mv "$made" "$set_dir/parts/$name.jsonl"
}

for entry in "${projects[@]}"; do
  read -r spec max <<<"$entry"
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || true; done
  make_part "$spec" "$max" &
done
wait
for entry in "${projects[@]}"; do  # a part is there only when its project finished
  read -r spec _ <<<"$entry"
  [[ -f "$set_dir/parts/${spec%%==*}.jsonl" ]] || { echo "swe_factory: $spec failed (its log is above); run" \
    "again to go on" >&2; exit 1; }
done

rm -f "$set_dir"/{instances.jsonl,stats.txt,validate.txt,LICENSES}{,.tmp}
for entry in "${projects[@]}"; do
  read -r spec _ <<<"$entry"
  name=${spec%%==*}
  cat "$set_dir/parts/$name.jsonl" >>"$set_dir/instances.jsonl"
  grep -h "swe-make: .* kept of" "$set_dir/parts/$name.log" | sed "s|^.*/sdists/||" >>"$set_dir/stats.txt.tmp"
  sed "s|^validate: |$name: validate: |" "$set_dir/parts/$name.validate" >>"$set_dir/validate.txt.tmp"
done
mv "$set_dir/stats.txt.tmp" "$set_dir/stats.txt"
mv "$set_dir/validate.txt.tmp" "$set_dir/validate.txt"
total=$(wc -l <"$set_dir/instances.jsonl")
good=$(grep -o "[0-9]* good, 0 bad, 0 schema" "$set_dir/validate.txt" | awk '{n += $1} END {print n + 0}')
(( good == total )) || { echo "swe_factory: $good of $total instances validated good" >&2; exit 1; }
echo "validate: all $total instances good (the gold scores 1, the empty patch 0)" >>"$set_dir/validate.txt"
"$python" -c 'import sys; from m1flow.data.swe_factory import license_lines
print(*license_lines(sys.argv[1]), sep="\n")' "$set_dir/instances.jsonl" >"$set_dir/LICENSES"
cat "$set_dir/stats.txt" "$set_dir/validate.txt" "$set_dir/LICENSES"
date -u +%FT%TZ >"$set_dir/COMPLETE"
echo "$set_dir"
