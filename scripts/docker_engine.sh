#!/usr/bin/env bash
# Make `docker` and `docker compose` (v2) answer on this machine, idempotently; print nothing on
# success. When no engine answers: install Debian's docker.io (root or sudo) and start dockerd in
# the background (it then stays up like a system service). When `docker compose` is not v2: build
# Compose from its Go module once, cached outside the checkout, and install it as a CLI plugin.
# Exit 3 with a one-line reason on stderr when this machine cannot run an engine at all.
#   docker_engine.sh           both, in that order
#   docker_engine.sh engine    the engine alone (scripts/setup.sh)
#   docker_engine.sh compose   Compose alone (scripts/test.sh builds it in the background)
# Each part holds its own lock, so a caller of one part never waits for the other's build.
# See ../shared/notes/docker_local.md for what was measured.
set -euo pipefail
here="$(cd "${BASH_SOURCE[0]%/*}" && pwd)"
cache="${M1FLOW_CACHE:-$HOME/.cache/m1flow}"
compose_version="${COMPOSE_VERSION:-v2.32.4}"
state="$cache/docker"
mkdir -p "$state"
part="${1:-all}"
case "$part" in all|engine|compose) ;; *) echo "usage: $0 [engine|compose]" >&2; exit 2 ;; esac

cannot() { echo "docker_engine: cannot run a Docker engine here: $*" >&2; exit 3; }
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
as_root() {
  if [ -n "$sudo" ] && ! sudo -n true 2>/dev/null; then cannot "not root and no password-less sudo"; fi
  $sudo "$@"
}

engine_answers() { command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; }

start_engine() {
  if ! command -v dockerd >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || cannot "no dockerd and no apt-get to install docker.io"
    echo "docker_engine: installing docker.io (first run only)" >&2
    bash "$here/apt_install.sh" docker.io >"$state/apt.log" 2>&1 \
      || cannot "apt-get install docker.io failed (log: $state/apt.log)"
  fi
  echo "docker_engine: starting dockerd (log: $state/dockerd.log)" >&2
  as_root true
  # setsid: the engine outlives this script and the test run that started it, like a system
  # service; 8>&-: it must not inherit (and hold forever) this script's lock.
  ( exec 8>&- </dev/null >"$state/dockerd.log" 2>&1; exec $sudo setsid dockerd ) &
  for _ in $(seq 60); do
    engine_answers && return 0
    sleep 1
  done
  cannot "dockerd did not answer within 60 s; last lines of $state/dockerd.log: $(tail -n 3 "$state/dockerd.log" | tr '\n' ' ')"
}

# `docker compose` exists only as a CLI plugin, and only v2 is one (v1 was the separate docker-compose).
compose_is_v2() { docker compose version >/dev/null 2>&1; }

install_compose() {
  local bin="$cache/compose-$compose_version/docker-compose"
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null 2>&1 || cannot "docker compose v2 is missing and no Go toolchain can build it"
    echo "docker_engine: building Compose $compose_version from its Go module (first run only, minutes)" >&2
    local gobin="$cache/compose-$compose_version.tmp"
    rm -rf "$gobin"
    GOFLAGS=-mod=mod GOBIN="$gobin" GOPATH="$cache/go" GOCACHE="$cache/go-build" \
      go install -ldflags "-X github.com/docker/compose/v2/internal.Version=$compose_version" \
      "github.com/docker/compose/v2/cmd@$compose_version" >"$state/compose-build.log" 2>&1 \
      || cannot "go install github.com/docker/compose/v2/cmd@$compose_version failed (log: $state/compose-build.log)"
    mkdir -p "$(dirname "$bin")"
    mv "$gobin/cmd" "$bin"
    rm -rf "$gobin"
  fi
  mkdir -p "$HOME/.docker/cli-plugins"
  install -m 755 "$bin" "$HOME/.docker/cli-plugins/docker-compose"
  compose_is_v2 || cannot "docker compose does not answer as v2 after installing $bin"
}

if [ "$part" != compose ]; then
  exec 8>"$state/.setup.lock"
  flock 8
  engine_answers || start_engine
  exec 8>&-
fi
if [ "$part" != engine ]; then
  exec 8>"$state/.compose.lock"
  flock 8
  compose_is_v2 || install_compose
fi
