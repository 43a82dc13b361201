#!/bin/sh
# Starts Redis with the users scripts/redis.sh makes: the default user off
# (a client without credentials gets NOAUTH), "manager" (the
# worker-manager: its key prefix, no @dangerous command but the ACL
# subcommands it makes the per-worker users with) and "consumer" (your
# services and workerctl: the key prefix, no @dangerous command).
# Passwords are stored as SHA-256 in an ACL file outside the data volume;
# the data is kept in an append-only file in /data.
set -eu
: "${MANAGER_PASSWORD:?set MANAGER_PASSWORD}"
: "${CONSUMER_PASSWORD:?set CONSUMER_PASSWORD}"
PREFIX=${WORKER_KEY_PREFIX:-worker}
PORT=${REDIS_PORT:-6379}
BIND=${REDIS_BIND:-127.0.0.1}
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
acl=$(mktemp /tmp/users.acl.XXXXXX)
chmod 600 "$acl"
# The default user is off (nobody logs in as it); its rules allow all
# because Redis 7.0 replays the append-only file under them, and would
# drop every transaction and multi-write script in it otherwise.
cat >"$acl" <<ACL
user default off resetchannels ~* +@all
user manager on #$(sha "$MANAGER_PASSWORD") resetchannels ~$PREFIX:* +@all -@dangerous +acl|setuser +acl|deluser +acl|users +acl|whoami
user consumer on #$(sha "$CONSUMER_PASSWORD") resetchannels ~$PREFIX:* +@all -@dangerous
ACL
exec redis-server --bind "$BIND" --port "$PORT" --dir /data --appendonly yes --save '' --aclfile "$acl"
