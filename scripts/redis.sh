#!/usr/bin/env bash
# Makes sure a Redis answers at 127.0.0.1:${REDIS_PORT:-6379} for the demo,
# workerctl and the examples: starts Debian's redis-server (loopback only,
# data in /var/lib/agentvisor/redis) when nothing answers there. Tests do not
# use it: they start their own throwaway instances.
set -euo pipefail
PORT=${REDIS_PORT:-6379}
DIR=/var/lib/agentvisor/redis
if redis-cli -h 127.0.0.1 -p "$PORT" ping >/dev/null 2>&1; then
  exit 0
fi
command -v redis-server >/dev/null || { echo "redis: redis-server is missing (run make setup)" >&2; exit 1; }
mkdir -p "$DIR"
echo "redis: starting redis-server on 127.0.0.1:$PORT (data and log in $DIR)"
redis-server --bind 127.0.0.1 --port "$PORT" --dir "$DIR" --daemonize yes \
  --logfile "$DIR/redis.log" --pidfile "$DIR/redis.pid" --save '' --appendonly no
for _ in $(seq 50); do
  redis-cli -h 127.0.0.1 -p "$PORT" ping >/dev/null 2>&1 && exit 0
  sleep 0.1
done
echo "redis: redis-server did not answer on 127.0.0.1:$PORT; see $DIR/redis.log" >&2
exit 1
