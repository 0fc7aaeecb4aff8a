#!/usr/bin/env bash
# A real S3-compatible server for the object-store checkpoint tests and bench: s3s-fs (crates.io,
# Apache-2.0), the S3 protocol of the `s3s` crate served over a directory (buckets are its
# subdirectories). Built once from crates.io with cargo, cached under ~/.cache/m1flow/s3 (never in
# the checkout); a second `build` takes milliseconds.
#
#   scripts/s3_server.sh build              # cargo install (cold: a few minutes on 2 cores), print the binary
#   scripts/s3_server.sh up DIR PORT [BUCKET...]  # serve DIR on 127.0.0.1:PORT, print the endpoint
#   scripts/s3_server.sh down [PORT]        # stop the server on PORT (every one started here without it)
#
# Credentials: M1FLOW_S3_ACCESS_KEY / M1FLOW_S3_SECRET_KEY (default m1flow / m1flow-secret); the
# server checks SigV4 signatures with them, as a real store does.
# 0.14.1: the newest release that builds with the machine's rustc 1.95 (0.17 needs 1.96).
# Why s3s-fs: measured on 2 shared cores, its cold build is ~3 CPU-minutes (2m35 user + 16 s sys;
# 7m48 wall under a load average of 12-17) from ~13 MB of crates, to a 9.7 MB binary. SeaweedFS (Go
# module github.com/seaweedfs/seaweedfs; `go install` refuses it for its replace directives, so it
# builds from a copy of the module) needs 3.4 GB of modules (87 s to fetch) and ~8 CPU-minutes
# (6m42 user + 1m06 sys; 32 min wall at nice 19 under load) to a 233 MB binary; it serves the same
# code path (checked: multipart upload, list, ranged download). MinIO's server is AGPL: not used.
set -euo pipefail
VERSION="${M1FLOW_S3S_VERSION:-0.14.1}"
cache="${M1FLOW_CACHE:-$HOME/.cache/m1flow}/s3"
prefix="$cache/s3s-fs-$VERSION"
bin="$prefix/bin/s3s-fs"
state="$cache/servers"
access="${M1FLOW_S3_ACCESS_KEY:-m1flow}"
secret="${M1FLOW_S3_SECRET_KEY:-m1flow-secret}"

build() {
  if [ -x "$bin" ]; then echo "$bin"; return; fi
  command -v cargo >/dev/null 2>&1 || { echo "s3_server: cargo not found (install Rust to build s3s-fs)" >&2; exit 3; }
  mkdir -p "$cache"
  exec 9>"$cache/.build.lock"
  flock 9
  if [ ! -x "$bin" ]; then
    echo "s3_server: building s3s-fs $VERSION from crates.io (first run only; log: $cache/build.log)" >&2
    local started=$SECONDS
    if ! CARGO_TARGET_DIR="$cache/target" nice -n 19 cargo install "s3s-fs@$VERSION" --features binary \
        --locked --root "$prefix" >"$cache/build.log" 2>&1; then
      echo "s3_server: building s3s-fs failed; the log's tail:" >&2
      tail -n 30 "$cache/build.log" >&2
      exit 1
    fi
    rm -rf "$cache/target"  # the binary is all that is needed (the build dir is ~1 GB)
    echo "s3_server: built in $((SECONDS - started)) s" >&2
  fi
  echo "$bin"
}

up() {
  local dir="$1" port="$2"; shift 2
  build >/dev/null
  mkdir -p "$dir" "$state"
  for bucket in "$@"; do mkdir -p "$dir/$bucket"; done
  down "$port" 2>/dev/null || true
  nohup "$bin" --host 127.0.0.1 --port "$port" --access-key "$access" --secret-key "$secret" "$dir" \
    >"$state/$port.log" 2>&1 &
  echo $! >"$state/$port.pid"
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "http://127.0.0.1:$port"; return; fi
    kill -0 "$(cat "$state/$port.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "s3_server: s3s-fs did not listen on $port; its log:" >&2
  tail -n 20 "$state/$port.log" >&2
  exit 1
}

down() {
  local ports=("$@")
  [ ${#ports[@]} -gt 0 ] || ports=($(ls "$state" 2>/dev/null | sed -n 's/\.pid$//p'))
  for port in "${ports[@]}"; do
    local pidfile="$state/$port.pid"
    [ -f "$pidfile" ] || continue
    local pid; pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bin" ]; then
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile" "$state/$port.log"
  done
}

case "${1:-}" in
  build) build ;;
  up) [ $# -ge 3 ] || { echo "usage: $0 up DIR PORT [BUCKET...]" >&2; exit 2; }; shift; up "$@" ;;
  down) shift; down "$@" ;;
  *) echo "usage: $0 build | up DIR PORT [BUCKET...] | down [PORT]" >&2; exit 2 ;;
esac
