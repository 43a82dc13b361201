#!/usr/bin/env bash
# Makes sure the project's Redis answers at 127.0.0.1:${REDIS_PORT:-6379}
# for the demo, workerctl and the examples, and that it lets no one in
# without a password:
#
#   - the default user is off: a client without credentials gets NOAUTH;
#   - two users, from the ACL file $DIR/users.acl (mode 0600, passwords as
#     SHA-256 only):
#       manager   the worker-manager: every command but the @dangerous
#                 ones (KEYS, FLUSHALL, CONFIG, SHUTDOWN, DEBUG, MONITOR,
#                 CLIENT KILL...), given back the ACL subcommands it makes
#                 the per-worker users with (SETUSER, DELUSER, USERS,
#                 WHOAMI), on the keys of the key prefix (worker:*, or
#                 $WORKER_KEY_PREFIX:*), no Pub/Sub channel: the rules of
#                 protocol/PROTOCOL.md, "Redis users (ACL)";
#       consumer  workerctl, the examples and the demo's client side: every
#                 command but the @dangerous ones, on the keys of the key
#                 prefix only (worker:*, or $WORKER_KEY_PREFIX:*), no
#                 Pub/Sub channel;
#   - random passwords, made once and kept as ready-to-use URLs in
#     $DIR/credentials.env (mode 0600):
#       REDIS_MANAGER_URL=redis://manager:<password>@127.0.0.1:<port>/0
#       REDIS_CONSUMER_URL=redis://consumer:<password>@127.0.0.1:<port>/0
#   - appendonly yes, loopback only, data and log in $DIR.
#
# A Redis that answers on the port without a password is an older set-up
# of this project when the pid file in $DIR names it: it is stopped (it
# kept nothing: it ran without persistence) and started again as above.
# Anyone else's is left alone and the script fails, saying so. A second
# run changes nothing.
#
# REDIS_DIR replaces /var/lib/agentvisor/redis (scripts/test-redis.sh runs
# it on a port and a directory of its own). Tests do not use it otherwise:
# they start their own throwaway instances.
set -euo pipefail
PORT=${REDIS_PORT:-6379}
DIR=${REDIS_DIR:-/var/lib/agentvisor/redis}
CREDS=$DIR/credentials.env
ACLFILE=$DIR/users.acl
PIDFILE=$DIR/redis.pid
HOST=127.0.0.1
PREFIX=${WORKER_KEY_PREFIX:-worker}

die() { echo "redis: $*" >&2; exit 1; }
[[ $PORT =~ ^[0-9]+$ ]] && ((PORT >= 1 && PORT <= 65535)) || die "REDIS_PORT=$PORT is not a port number (1-65535)"
[[ $DIR = /* ]] || die "REDIS_DIR=$DIR is not an absolute path"
[[ $PREFIX =~ ^[A-Za-z0-9_.:-]+$ && $PREFIX != :* && $PREFIX != *: ]] || die "WORKER_KEY_PREFIX=$PREFIX: letters, digits and _.:- only, not starting or ending with ':'"
for c in redis-server redis-cli sha256sum; do
  command -v "$c" >/dev/null || die "$c is missing (run make setup)"
done

# The first line of a command's reply, sent as nobody (no credentials) or
# as a user of the ACL file (its password through REDISCLI_AUTH, never on
# a command line). Empty when nothing answers.
as_nobody() { redis-cli -h "$HOST" -p "$PORT" "$@" 2>/dev/null | head -1 || true; }
as_user() {
  local user=$1 pw=$2; shift 2
  REDISCLI_AUTH=$pw redis-cli --no-auth-warning --user "$user" -h "$HOST" -p "$PORT" "$@" 2>/dev/null | head -1 || true
}

# write_if_changed FILE: stdin becomes FILE (mode 0600) unless FILE holds
# it already, so that a second run touches nothing.
write_if_changed() {
  local f=$1 tmp
  tmp=$(mktemp "$f.XXXXXX")
  cat >"$tmp"
  chmod 600 "$tmp"
  if [ -f "$f" ] && cmp -s "$tmp" "$f"; then
    rm -f "$tmp"
    [ "$(stat -c %a "$f")" = 600 ] || chmod 600 "$f"
    return 1
  fi
  mv -f "$tmp" "$f"
}

mkdir -p "$DIR"
[ "$(stat -c %a "$DIR")" = 700 ] || chmod 700 "$DIR"

# The passwords: those of credentials.env when it has them, else new.
password_of() { [ -f "$CREDS" ] && sed -n "s|^REDIS_$1_URL=redis://$2:\([0-9a-f]\{48\}\)@.*|\1|p" "$CREDS" | head -1 || true; }
newpw() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }
MANAGER_PW=$(password_of MANAGER manager); [ -n "$MANAGER_PW" ] || MANAGER_PW=$(newpw)
CONSUMER_PW=$(password_of CONSUMER consumer); [ -n "$CONSUMER_PW" ] || CONSUMER_PW=$(newpw)
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

changed=""
write_if_changed "$CREDS" <<EOF && changed="$changed credentials.env"
# The project's Redis (scripts/redis.sh). Source this file, then give the
# worker-manager REDIS_URL=\$REDIS_MANAGER_URL and workerctl, the examples
# and other consumers REDIS_URL=\$REDIS_CONSUMER_URL.
REDIS_MANAGER_URL=redis://manager:$MANAGER_PW@$HOST:$PORT/0
REDIS_CONSUMER_URL=redis://consumer:$CONSUMER_PW@$HOST:$PORT/0
EOF
# The default user is off: no connection can log in as it. Its rules still
# allow every command on every key because Redis 7.0 checks the append-only
# file's replay against them: with none, every MULTI/EXEC block and every
# script of several writes in the file is refused at start ("ACLs rules
# changed between the moment the transaction was accumulated and the EXEC
# call"), and those writes are lost with a restart.
write_if_changed "$ACLFILE" <<EOF && changed="$changed users.acl"
user default off resetchannels ~* +@all
user manager on #$(sha "$MANAGER_PW") resetchannels ~$PREFIX:* +@all -@dangerous +acl|setuser +acl|deluser +acl|users +acl|whoami
user consumer on #$(sha "$CONSUMER_PW") resetchannels ~$PREFIX:* +@all -@dangerous
EOF

# ours: the pid file names a live redis-server serving this port.
ours() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qE "^redis-server .*:$PORT( |$)"
}

stop_ours() {
  local pid
  pid=$(cat "$PIDFILE")
  echo "redis: stopping redis-server (pid $pid) on $HOST:$PORT: $1"
  kill "$pid"
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  die "redis-server (pid $pid) did not stop; see $DIR/redis.log"
}

plain=$(as_nobody ping)
case "$plain" in
"")
  ;; # nothing answers: start it below
PONG)
  ours || die "a Redis that needs no password answers on $HOST:$PORT and it is not this project's (no pid file in $DIR names it): anyone could read and forge every worker's data. Stop it (or put a password on it and point REDIS_URL at it), or set REDIS_PORT to another port."
  stop_ours "it lets anyone in without a password (an older set-up)"
  ;;
*)
  if [ "$(as_user manager "$MANAGER_PW" ping)" = PONG ] && [ "$(as_user consumer "$CONSUMER_PW" ping)" = PONG ]; then
    case "$changed" in
    "")
      echo "redis: running on $HOST:$PORT, default user off, credentials in $CREDS: nothing to do"
      exit 0 ;;
    " credentials.env")
      echo "redis: running on $HOST:$PORT; its URLs rewritten in $CREDS"
      exit 0 ;;
    esac
    # The users' rules changed (a newer version of this script): Redis
    # reads them at start; the worker-manager makes its workers' users
    # again when it reconnects.
    ours || die "the users of $ACLFILE changed, and the Redis on $HOST:$PORT is not this project's (no pid file in $DIR names it): restart it yourself."
    stop_ours "the users of $ACLFILE changed"
  else
    ours || die "a Redis that refuses the credentials of $CREDS answers on $HOST:$PORT and it is not this project's (no pid file in $DIR names it). Stop it, or set REDIS_PORT to another port."
    stop_ours "its users are not those of $ACLFILE"
  fi
  ;;
esac

echo "redis: starting redis-server on $HOST:$PORT (default user off, users in $ACLFILE, append-only file, data and log in $DIR)"
redis-server --bind "$HOST" --port "$PORT" --protected-mode yes --dir "$DIR" --daemonize yes \
  --logfile "$DIR/redis.log" --pidfile "$PIDFILE" --save '' --appendonly yes --aclfile "$ACLFILE"
for _ in $(seq 50); do
  if [ "$(as_user manager "$MANAGER_PW" ping)" = PONG ]; then
    echo "redis: credentials in $CREDS (. $CREDS; REDIS_URL=\$REDIS_MANAGER_URL for the worker-manager, \$REDIS_CONSUMER_URL for clients)"
    exit 0
  fi
  sleep 0.1
done
die "redis-server did not answer on $HOST:$PORT; see $DIR/redis.log"
