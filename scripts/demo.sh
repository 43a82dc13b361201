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
echo "demo: building bin/worker-manager, bin/workerctl and bin/demo"
mkdir -p bin
(cd spawner && go build -o ../bin/worker-manager ./cmd/worker-manager && go build -o ../bin/workerctl ./cmd/workerctl)
(cd examples && go build -o ../bin/demo ./demo)
exec bin/demo -manager bin/worker-manager -redis "${REDIS_URL:-redis://127.0.0.1:6379/0}"
