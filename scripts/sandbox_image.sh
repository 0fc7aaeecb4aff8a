#!/usr/bin/env bash
# Build svc_sandbox's run image (docker/sandbox/Dockerfile) when it is missing, and print its tag.
# Idempotent: the tag is keyed by the Dockerfile and the base image's id, so a rebuild happens only
# when either changed; the image stays in the engine (outside the checkout). Also tags
# m1flow-sandbox:latest, DockerConfig.image's default. Needs an engine (scripts/docker_engine.sh).
#   M1FLOW_SANDBOX_BASE  base image (default python:3.11-slim; a local Debian image where no registry answers)
# Exit 3 with a one-line reason when the base image is neither here nor pullable.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
base="${M1FLOW_SANDBOX_BASE:-python:3.11-slim}"
lock_dir="${M1FLOW_CACHE:-$HOME/.cache/m1flow}/docker"
mkdir -p "$lock_dir"
exec 9>"$lock_dir/.sandbox-image.lock"
flock 9
if ! docker image inspect "$base" >/dev/null 2>&1 && ! docker pull -q "$base" >&2; then
  echo "sandbox_image: base image $base is not here and cannot be pulled; set M1FLOW_SANDBOX_BASE" >&2
  exit 3
fi
base_id="$(docker image inspect -f '{{.Id}}' "$base")"
key="$( (cat "$root/docker/sandbox/Dockerfile"; echo "$base_id") | sha256sum | cut -c1-16)"
tag="m1flow-sandbox:$key"
if ! docker image inspect "$tag" >/dev/null 2>&1; then
  echo "sandbox_image: building $tag from $base" >&2
  # The legacy builder: this Dockerfile needs no BuildKit feature, and Debian's engine has no buildx.
  DOCKER_BUILDKIT=0 docker build -q --build-arg BASE="$base" -t "$tag" "$root/docker/sandbox" >&2
fi
docker tag "$tag" m1flow-sandbox:latest
echo "$tag"
