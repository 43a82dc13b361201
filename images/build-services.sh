#!/usr/bin/env bash
# Builds the images of the runtime's own services for a cluster
# (deploy/kubernetes/runtime): worker-manager and worker-gateway, with the
# static binaries of this checkout, and Redis, each on os-base and tagged
# by a hash of what went in (the binary and the Dockerfile), so that a
# node's containerd holds each build under a name of its own. It prints
# the three image names, one a line. No registry: `scripts/k8s.sh load`
# imports them into the local cluster.
#
#   images/build-services.sh      (BASE_IMAGE=debian:bookworm-slim where a registry answers)
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE_IMAGE:-agentvisor/os-base:bookworm}
log() { printf 'images: %s\n' "$*" >&2; }
ctx=$(mktemp -d /tmp/agentvisor-services.XXXXXX)
trap 'rm -rf "$ctx"' EXIT

# build NAME DOCKERFILE [BINARY]: the image agentvisor/NAME:<hash>, unless
# Docker has it already.
build() {
  local name=$1 dockerfile=$2 bin=${3:-} dir=$ctx/image-$1 tag
  mkdir -p "$dir"
  cp "$dockerfile" "$dir/Dockerfile"
  [ -z "$bin" ] || cp "$bin" "$dir/"
  tag=agentvisor/$name:$(cd "$dir" && cat ./* | sha256sum | cut -c1-12)
  if docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag is built"
  else
    log "building $tag on $BASE"
    DOCKER_BUILDKIT=0 docker build --network host --build-arg "BASE_IMAGE=$BASE" -t "$tag" "$dir" >"$dir.log" 2>&1 || {
      tail -30 "$dir.log" >&2; exit 1; }
  fi
  echo "$tag"
}

(cd spawner && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/bin/worker-manager" ./cmd/worker-manager)
(cd gateway && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/bin/worker-gateway" ./cmd/worker-gateway)
build worker-manager images/services/manager.Dockerfile "$ctx/bin/worker-manager"
build worker-gateway images/services/gateway.Dockerfile "$ctx/bin/worker-gateway"
build redis images/services/redis.Dockerfile
