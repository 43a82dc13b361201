#!/usr/bin/env bash
# Makes the local OS base image without a registry: debootstrap a minimal
# Debian bookworm into a temporary directory and `docker import` it.
#
#   images/build-base.sh            build agentvisor/os-base:bookworm if missing
#   FORCE=1 images/build-base.sh    build it again
#
# Where a registry is reachable, debian:bookworm-slim can serve as the base
# instead: build worker-base with BASE_IMAGE=debian:bookworm-slim.
set -euo pipefail
TAG=${OS_BASE_IMAGE:-agentvisor/os-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { printf 'images: %s\n' "$*"; }

if [ -z "${FORCE:-}" ] && docker image inspect "$TAG" >/dev/null 2>&1; then
  log "$TAG is present"
  exit 0
fi
command -v debootstrap >/dev/null || { log "debootstrap is missing (run make setup)" >&2; exit 1; }
dir=$(mktemp -d /tmp/agentvisor-rootfs.XXXXXX)
trap 'rm -rf "$dir"' EXIT
log "debootstrap --variant=minbase bookworm from $MIRROR (about 30 s)"
debootstrap --variant=minbase bookworm "$dir/rootfs" "$MIRROR" >"$dir/debootstrap.log" 2>&1 || {
  tail -20 "$dir/debootstrap.log" >&2; exit 1; }
# Nothing of the build machine's state belongs in the image.
rm -rf "$dir"/rootfs/var/lib/apt/lists/* "$dir"/rootfs/var/cache/apt/*.bin "$dir"/rootfs/var/log/*.log
log "docker import as $TAG"
tar -C "$dir/rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --change 'LABEL io.agentvisor.managed=true io.agentvisor.image=os-base' \
  - "$TAG" >/dev/null
log "$TAG built"
