#!/usr/bin/env bash
# Builds the compose example's three images from this checkout, with no
# registry: the static worker-manager and worker-gateway, and Redis from
# Debian's package, each on agentvisor/os-base:bookworm (images/build-base.sh
# makes it). The builds use host networking so that apt-get reaches Debian's
# mirror. MANAGER_IMAGE, GATEWAY_IMAGE and REDIS_IMAGE name the tags
# (compose.yaml reads the same variables).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MANAGER_IMAGE=${MANAGER_IMAGE:-agentvisor/worker-manager:latest}
GATEWAY_IMAGE=${GATEWAY_IMAGE:-agentvisor/worker-gateway:latest}
REDIS_IMAGE=${REDIS_IMAGE:-agentvisor/redis:latest}
BASE=${BASE_IMAGE:-agentvisor/os-base:bookworm}
log() { printf 'compose: %s\n' "$*"; }

docker image inspect "$BASE" >/dev/null 2>&1 || "$root/images/build-base.sh"
ctx=$(mktemp -d /tmp/agentvisor-compose.XXXXXX)
trap 'rm -rf "$ctx"' EXIT

image() { # image TAG DIR [BINARY MODULE PACKAGE]
  local tag=$1 dir=$2
  rm -rf "$ctx/build" && mkdir "$ctx/build"
  cp -r "$here/$dir/." "$ctx/build/"
  if [ $# -gt 2 ]; then
    (cd "$root/$4" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/build/$3" "$5")
  fi
  log "building $tag"
  DOCKER_BUILDKIT=0 docker build --network host --build-arg "BASE_IMAGE=$BASE" -t "$tag" "$ctx/build" >"$ctx/build.log" 2>&1 || {
    tail -30 "$ctx/build.log" >&2; exit 1; }
}
image "$MANAGER_IMAGE" manager worker-manager spawner ./cmd/worker-manager
image "$GATEWAY_IMAGE" gateway worker-gateway gateway ./cmd/worker-gateway
image "$REDIS_IMAGE" redis
log "built $MANAGER_IMAGE, $GATEWAY_IMAGE, $REDIS_IMAGE"
