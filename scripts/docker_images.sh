#!/usr/bin/env bash
# Decide which base images the cluster builds on, and print them as KEY=VALUE lines for compose:
#   M1FLOW_BASE_IMAGE   the Python image the project's Dockerfile starts from
#   M1FLOW_KAFKA_IMAGE  the broker's image
#   M1FLOW_SANDBOX_BASE the base of svc_sandbox's run image (scripts/sandbox_image.sh): any Debian
# Where an image registry answers: the public images (python:3.11-slim, apache/kafka). Where none
# does (these machines): local stand-ins, built once and kept by the engine, from a debootstrap
# Debian base (its rootfs tarball cached outside the checkout) and, for Kafka, the same Maven jars
# the local broker runs (scripts/kafka_jars.sh). Idempotent: seconds when everything exists.
# Needs an engine (scripts/docker_engine.sh). M1FLOW_LOCAL_IMAGES=1 skips asking the registry.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${M1FLOW_CACHE:-$HOME/.cache/m1flow}"
state="$cache/docker"
kafka_version="${KAFKA_VERSION:-4.1.1}"
public_python="python:3.11-slim"
public_kafka="apache/kafka:$kafka_version"
mkdir -p "$state"
exec 8>"$state/.images.lock"
flock 8

timeout 20 docker info >/dev/null 2>&1 || { echo "docker_images: no Docker engine answers (scripts/docker_engine.sh)" >&2; exit 3; }
have() { docker image inspect "$1" >/dev/null 2>&1; }
log() { echo "docker_images: $*" >&2; }
# A short hash of files: a stand-in is rebuilt when what it is built from changes.
digest() { cat "$@" | sha256sum | cut -c1-12; }

registry_answers() {
  [ "${M1FLOW_LOCAL_IMAGES:-0}" = 1 ] && return 1
  have "$public_python" && have "$public_kafka" && return 0
  timeout 120 docker pull -q "$public_python" >/dev/null 2>&1 \
    && timeout 300 docker pull -q "$public_kafka" >/dev/null 2>&1
}

debian_mirror() {
  local uri
  uri="$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
           /etc/apt/sources.list 2>/dev/null | grep -v security | head -n 1 | grep -oE 'https?://[^ ]+' || true)"
  echo "${uri:-http://deb.debian.org/debian}"
}

# A minimal Debian bookworm imported from a debootstrap tree (no registry needed).
debian_base() {
  local image="m1flow/debian:bookworm" tarball="$state/debian-bookworm-minbase.tar"
  have "$image" && { echo "$image"; return; }
  if [ ! -s "$tarball" ]; then
    if ! command -v debootstrap >/dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then
      log "installing debootstrap"
      bash "$here/scripts/apt_install.sh" debootstrap >"$state/apt-debootstrap.log" 2>&1 || { log "cannot install debootstrap (log: $state/apt-debootstrap.log)"; exit 3; }
    fi
    local root="$state/debootstrap.tmp" mirror
    mirror="$(debian_mirror)"
    log "building a Debian bookworm base with debootstrap from $mirror (first run only, about a minute)"
    rm -rf "$root"
    PATH="$PATH:/usr/sbin:/sbin" debootstrap --variant=minbase bookworm "$root" "$mirror" \
      >"$state/debootstrap.log" 2>&1 || { log "debootstrap failed (log: $state/debootstrap.log)"; exit 3; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  docker import --change 'LABEL org.m1flow.image=stand-in' --change 'CMD ["bash"]' \
    "$tarball" "$image" >/dev/null
  echo "$image"
}

# docker build (the engine's own builder: these need no build secrets) of a stand-in, if missing.
build_stand_in() {
  local image="$1" context="$2" base="$3"
  have "$image" && return 0
  log "building $image (first run only)"
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE_IMAGE=$base" -t "$image" "$context" \
    >"$state/build-$(basename "$context").log" 2>&1 \
    || { log "building $image failed (log: $state/build-$(basename "$context").log)"; exit 3; }
}

kafka_context() {
  local ctx="$state/kafka-context" jars tools
  jars="$(bash "$here/scripts/kafka_jars.sh")"
  tools="$cache/kafka-tools-$kafka_version/kafka-tools-$kafka_version.jar"
  if [ ! -s "$tools" ]; then  # BrokerApiVersionsCommand for the health check; not a broker jar
    mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
      -Dartifact="org.apache.kafka:kafka-tools:$kafka_version" -DoutputDirectory="$(dirname "$tools")" \
      >"$state/mvn-kafka-tools.log" 2>&1 || { log "fetching kafka-tools failed (log: $state/mvn-kafka-tools.log)"; exit 3; }
  fi
  rm -rf "$ctx" && mkdir -p "$ctx/libs"
  cp "$here"/docker/kafka/* "$ctx/"
  ln "$jars"/*.jar "$tools" "$ctx/libs/" 2>/dev/null || cp "$jars"/*.jar "$tools" "$ctx/libs/"
  echo "$ctx"
}

if registry_answers; then
  python_image="$public_python"
  kafka_image="$public_kafka"
  sandbox_base="$public_python"
else
  base="$(debian_base)"
  sandbox_base="$base"
  python_image="m1flow/python:3.11-bookworm-$(digest "$here/docker/python/Dockerfile")"
  build_stand_in "$python_image" "$here/docker/python" "$base"
  kafka_image="m1flow/kafka:$kafka_version-$(digest "$here"/docker/kafka/*)"
  if ! have "$kafka_image"; then
    build_stand_in "$kafka_image" "$(kafka_context)" "$base"
    rm -rf "$state/kafka-context"
  fi
  docker image prune -f --filter label=org.m1flow.image=stand-in >/dev/null
fi
echo "M1FLOW_BASE_IMAGE=$python_image"
echo "M1FLOW_KAFKA_IMAGE=$kafka_image"
echo "M1FLOW_SANDBOX_BASE=$sandbox_base"
