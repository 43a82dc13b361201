#!/usr/bin/env bash
# Builds worker-base from images/worker-base/Dockerfile with the static
# worker-wrapper of this checkout. The build runs with host networking so
# that apt-get reaches Debian's mirror.
#
#   images/build-worker-base.sh     (BASE_IMAGE=debian:bookworm-slim where a registry answers)
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${WORKER_BASE_IMAGE:-agentvisor/worker-base:latest}
BASE=${BASE_IMAGE:-agentvisor/os-base:bookworm}
log() { printf 'images: %s\n' "$*"; }
ctx=$(mktemp -d /tmp/agentvisor-worker-base.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
(cd wrapper && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/worker-wrapper" ./cmd/worker-wrapper)
cp images/worker-base/Dockerfile "$ctx/"
log "building $TAG on $BASE"
# The legacy builder needs no buildx plugin; its deprecation notice goes
# to the log with the rest, shown only when the build fails.
DOCKER_BUILDKIT=0 docker build --network host --build-arg "BASE_IMAGE=$BASE" -t "$TAG" "$ctx" >"$ctx/build.log" 2>&1 || {
  tail -30 "$ctx/build.log" >&2; exit 1; }
log "$TAG built: $(docker image inspect -f '{{.Id}}' "$TAG")"
