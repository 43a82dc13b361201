#!/usr/bin/env bash
# Black-box tests of scripts/redis.sh, run by scripts/test-setup.sh (so by
# `make test`): on free ports and temporary directories of their own
# (REDIS_PORT, REDIS_DIR), never on the Redis of 127.0.0.1:6379.
#  1. the Redis it starts refuses a client without credentials (NOAUTH),
#     takes the manager URL and the consumer URL of credentials.env (0600),
#     confines the consumer to worker:* and no admin command, lets the
#     manager make and delete users, and keeps an append-only file whose
#     transactions and scripts survive a restart;
#  2. a second run changes nothing and says so;
#  3. an older set-up of the project (no password, its pid file in the
#     directory) is restarted with the secure configuration, same URLs;
#  4. someone else's Redis without a password on the port is left running
#     and the script fails, saying why.
# Every Redis it started is stopped at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
unset WORKER_KEY_PREFIX # the consumer's keys are then worker:*
pass=0; fail=0
ok()  { echo "ok   - redis.sh: $*"; pass=$((pass+1)); }
bad() { echo "FAIL - redis.sh: $*"; fail=$((fail+1)); }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for f in "$tmp"/*/redis.pid "$tmp"/*.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.2
  rm -rf "$tmp"
}
trap cleanup EXIT

# free_port: a loopback port nothing listens on.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  return 1
}
cli() { redis-cli --no-auth-warning -u "$1" "${@:2}" 2>&1 | head -1; }

port=$(free_port) || { bad "no free port"; exit 1; }
dir=$tmp/a
run() { REDIS_PORT=$port REDIS_DIR=$dir bash scripts/redis.sh 2>&1; }

# 1. A fresh start.
out=$(run); rc=$?
if [ $rc != 0 ]; then
  bad "first run failed (rc=$rc): $out"
else
  noauth=$(redis-cli -h 127.0.0.1 -p "$port" ping 2>&1 | head -1)
  [[ $noauth == NOAUTH* ]] && ok "a client without credentials is refused ($noauth)" || bad "a client without credentials got: $noauth"
  modes=$(stat -c %a "$dir/credentials.env" "$dir/users.acl" | tr '\n' ' ')
  [ "$modes" = "600 600 " ] && ok "credentials.env and users.acl are mode 0600" || bad "modes of credentials.env, users.acl: $modes"
  REDIS_MANAGER_URL=""; REDIS_CONSUMER_URL=""
  # shellcheck disable=SC1091
  . "$dir/credentials.env"
  pw=${REDIS_MANAGER_URL#redis://manager:}; pw=${pw%%@*}
  [ -n "$pw" ] && ! grep -q "$pw" "$dir/users.acl" && grep -q "#$(printf %s "$pw" | sha256sum | cut -d' ' -f1)" "$dir/users.acl" &&
    ok "users.acl holds the passwords' SHA-256, not the passwords" || bad "users.acl and the manager's password do not match as they should"
  [[ $REDIS_MANAGER_URL == redis://manager:*@127.0.0.1:$port/0 && $REDIS_CONSUMER_URL == redis://consumer:*@127.0.0.1:$port/0 ]] &&
    ok "credentials.env has the manager and consumer URLs" || bad "credentials.env: $(sed 's/:[0-9a-f]*@/:***@/' "$dir/credentials.env")"
  m_ping=$(cli "$REDIS_MANAGER_URL" ping); c_ping=$(cli "$REDIS_CONSUMER_URL" ping)
  [ "$m_ping/$c_ping" = PONG/PONG ] && ok "the manager URL and the consumer URL are let in" || bad "manager: $m_ping, consumer: $c_ping"
  xadd=$(cli "$REDIS_CONSUMER_URL" xadd worker:test:input '*' k v)
  other=$(cli "$REDIS_CONSUMER_URL" set other:key v)
  keys=$(cli "$REDIS_CONSUMER_URL" keys '*')
  acl=$(cli "$REDIS_CONSUMER_URL" acl setuser intruder on '>pw' '~*' +@all)
  if [[ $xadd =~ ^[0-9]+-[0-9]+$ && $other == NOPERM* && $keys == NOPERM* && $acl == NOPERM* ]]; then
    ok "the consumer writes worker:* and nothing else, runs no KEYS and no ACL"
  else
    bad "consumer: xadd worker:* $xadd; set other:* $other; keys $keys; acl setuser $acl"
  fi
  set_u=$(cli "$REDIS_MANAGER_URL" acl setuser agentvisor:worker:w1 on '>pw' '~worker:w1:*' +ping)
  del_u=$(cli "$REDIS_MANAGER_URL" acl deluser agentvisor:worker:w1)
  flush=$(cli "$REDIS_MANAGER_URL" flushall)
  m_other=$(cli "$REDIS_MANAGER_URL" set other:key v)
  [[ $set_u == OK && $del_u == 1 && $flush == NOPERM* && $m_other == NOPERM* ]] &&
    ok "the manager makes and deletes users, cannot FLUSHALL nor write outside worker:*" ||
    bad "manager: acl setuser $set_u; acl deluser $del_u; flushall $flush; set other:* $m_other"
  if [ -f "$dir/appendonlydir/appendonly.aof.manifest" ] && grep -rq "worker:test:input" "$dir/appendonlydir"; then
    ok "appendonly yes: the consumer's write is in the append-only file"
  else
    bad "no append-only file with the write in $dir/appendonlydir"
  fi
  redis-cli -h 127.0.0.1 -p "$port" config get bind 2>/dev/null | grep -q "0.0.0.0" && bad "bound beyond loopback"
  # Writes made in a transaction and by a script of several writes (as the
  # runtime makes most of its writes) are still there after a restart:
  # Redis replays its append-only file under the default user's rules.
  printf 'MULTI\nSET worker:test:tx1 1\nSET worker:test:tx2 1\nEXEC\n' | redis-cli --no-auth-warning -u "$REDIS_CONSUMER_URL" >/dev/null 2>&1
  cli "$REDIS_CONSUMER_URL" eval "redis.call('set', KEYS[1], 1); redis.call('set', KEYS[2], 1)" 2 worker:test:lua1 worker:test:lua2 >/dev/null
  kill "$(cat "$dir/redis.pid")"
  for _ in $(seq 50); do [ -f "$dir/redis.pid" ] || break; sleep 0.1; done
  run >/dev/null
  kept=$(for k in tx1 tx2 lua1 lua2; do cli "$REDIS_CONSUMER_URL" exists "worker:test:$k"; done | tr -d '\n')
  [ "$kept" = 1111 ] && ok "a transaction's and a script's writes survive a restart" ||
    bad "after a restart, worker:test:tx1 tx2 lua1 lua2 exist: $kept ($(grep -c CRITICAL "$dir/redis.log") CRITICAL lines in redis.log)"
fi

# 2. A second run changes nothing.
before=$(cd "$dir" && sha256sum credentials.env users.acl redis.pid; stat -c %Y credentials.env users.acl)
out=$(run); rc=$?
after=$(cd "$dir" && sha256sum credentials.env users.acl redis.pid; stat -c %Y credentials.env users.acl)
if [ $rc = 0 ] && grep -q "nothing to do" <<<"$out" && ! grep -q starting <<<"$out" && [ "$before" = "$after" ]; then
  ok "a second run changes nothing and says so"
else
  bad "second run (rc=$rc) did something: $out"
fi

# 3. An older set-up of the project: no password, our pid file.
old_url=$REDIS_MANAGER_URL
kill "$(cat "$dir/redis.pid")"
for _ in $(seq 50); do [ -f "$dir/redis.pid" ] || break; sleep 0.1; done
redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize yes --logfile "$dir/redis.log" \
  --pidfile "$dir/redis.pid" --save '' --appendonly no >/dev/null
for _ in $(seq 50); do [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
out=$(run); rc=$?
. "$dir/credentials.env"
noauth=$(redis-cli -h 127.0.0.1 -p "$port" ping 2>&1 | head -1)
if [ $rc = 0 ] && grep -q "stopping" <<<"$out" && [[ $noauth == NOAUTH* ]] && [ "$REDIS_MANAGER_URL" = "$old_url" ] && [ "$(cli "$REDIS_MANAGER_URL" ping)" = PONG ]; then
  ok "an older password-less Redis of the project is restarted secured, same URLs"
else
  bad "older set-up (rc=$rc, unauthenticated ping: $noauth): $out"
fi

# 4. Someone else's Redis without a password.
port2=$(free_port) || { bad "no free port"; exit 1; }
redis-server --bind 127.0.0.1 --port "$port2" --save '' --appendonly no --daemonize yes \
  --dir "$tmp" --pidfile "$tmp/foreign.pid" --logfile "$tmp/foreign.log" >/dev/null
for _ in $(seq 50); do [ "$(redis-cli -p "$port2" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
out=$(REDIS_PORT=$port2 REDIS_DIR=$tmp/b bash scripts/redis.sh 2>&1); rc=$?
if [ $rc != 0 ] && grep -q "not this project's" <<<"$out" && [ "$(redis-cli -p "$port2" ping 2>/dev/null)" = PONG ]; then
  ok "someone else's password-less Redis is left running and the script fails, saying why"
else
  bad "foreign Redis (rc=$rc): $out"
fi

echo "redis.sh: $pass passed, $fail failed"
[ $fail = 0 ]
