#!/usr/bin/env bash
# Black-box tests of scripts/setup.sh, run by `make test`:
#  1. a second run changes nothing and says so;
#  2. an engine killed with SIGKILL (stale pid file and socket left behind,
#     its process possibly a zombie) is started again;
#  3. the engine has gVisor's runtime runsc as daemon.json registers it,
#     and a daemon.json that says something else is left as it is;
#  4. scripts/redis.sh (scripts/test-redis.sh, on ports and directories of
#     its own).
# Test 2 kills the engine, so it runs only on an engine this project's
# set-up started (its command line carries --bridge=none and it logs to our
# file), never on an engine someone else runs.
set -uo pipefail
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { echo "ok   - $*"; pass=$((pass+1)); }
bad() { echo "FAIL - $*"; fail=$((fail+1)); }

bash scripts/setup.sh >/dev/null 2>&1 || bad "first set-up run failed"
out=$(bash scripts/setup.sh 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "nothing to do" <<<"$out" && ! grep -qE "installing|starting" <<<"$out"; then
  ok "a second set-up run changes nothing and says so"
else
  bad "second set-up run (rc=$rc) did something: $out"
fi

if docker info -f '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc":{[^}]*"--network=none","--host-uds=open"'; then
  ok "the engine has the runtime runsc with --network=none --host-uds=open"
else
  bad "the engine's runtimes lack runsc as setup registers it: $(docker info -f '{{json .Runtimes}}' 2>&1)"
fi
other=$(mktemp -d)
printf '{"log-level": "info"}\n' >"$other/daemon.json"
out=$(DOCKERD_CONFIG="$other/daemon.json" bash scripts/setup.sh 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(cat "$other/daemon.json")" = '{"log-level": "info"}' ] && grep -q "is not this script's" <<<"$out"; then
  ok "a daemon.json of someone else's is left as it is, and said"
else
  bad "a daemon.json of someone else's (rc=$rc): $(cat "$other/daemon.json"): $out"
fi
rm -rf "$other"

# The default engine only: the fleet harness's engines (faults/engines.go)
# carry --bridge=none too, with pid files of their own.
ours=""
for pid in $(pgrep -x dockerd); do
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--bridge=none.*--pidfile /var/run/docker.pid"; then ours=$pid; fi
done
if [ -z "$ours" ]; then
  echo "skip - stale engine restart: the running engine was not started by this project's set-up"
elif [ -n "$(docker ps -q 2>/dev/null)" ]; then
  echo "skip - stale engine restart: containers are running on the engine"
else
  kill -9 "$ours"
  for _ in $(seq 1 50); do docker info >/dev/null 2>&1 || break; sleep 0.1; done
  [ -e /var/run/docker.pid ] && stale="pid file left behind" || stale="no pid file"
  out=$(bash scripts/setup.sh 2>&1); rc=$?
  if [ $rc = 0 ] && grep -q "starting the Docker engine" <<<"$out" && docker info >/dev/null 2>&1; then
    ok "an engine killed with SIGKILL ($stale) is started again"
  else
    bad "restart after SIGKILL (rc=$rc): $out"
  fi
fi

echo "setup: $pass passed, $fail failed"
redis_rc=0
bash scripts/test-redis.sh || redis_rc=1
[ $fail = 0 ] && [ $redis_rc = 0 ]
