#!/usr/bin/env bash
# make demo: everything the demo needs (set-up has run already), then the
# demo itself (examples/demo), which prints one timeline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/redis.sh
bash images/build-base.sh
if ! docker image inspect "${WORKER_BASE_IMAGE:-agentvisor/worker-base:latest}" >/dev/null 2>&1 || [ -n "$(find wrapper protocol -name '*.go' -newer bin/.worker-base 2>/dev/null | head -1)" ] || [ ! -e bin/.worker-base ]; then
  bash images/build-worker-base.sh
  mkdir -p bin && touch bin/.worker-base
fi
echo "demo: building bin/worker-manager, bin/worker-gateway, bin/workerctl and bin/demo"
mkdir -p bin
(cd spawner && go build -o ../bin/worker-manager ./cmd/worker-manager && go build -o ../bin/workerctl ./cmd/workerctl)
(cd gateway && go build -o ../bin/worker-gateway ./cmd/worker-gateway)
(cd examples && go build -o ../bin/demo ./demo)
# The project's Redis (scripts/redis.sh) unless REDIS_URL names another:
# the demo's client connects as its consumer user, the worker-manager as
# its manager user. The URLs go through the environment, not the command
# line, which any local user may read.
if [ -z "${REDIS_URL:-}" ]; then
  set -a
  . "${REDIS_DIR:-/var/lib/agentvisor/redis}/credentials.env"
  set +a
fi
exec bin/demo -manager bin/worker-manager
