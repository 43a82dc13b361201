#!/usr/bin/env bash
# What a test run left behind (make test's last step).
#
#   scripts/leftovers.sh mark FILE    before the run: note the time, the
#                                     network namespaces and the processes
#   scripts/leftovers.sh check FILE   after it: what the run made and did
#                                     not remove, removed now; exit 1 if any
#                                     (LEFTOVERS_DRY_RUN=1: only listed)
#
# A run's own: the Docker containers and volumes made since the mark that
# carry a key prefix other than the deployment's ($WORKER_KEY_PREFIX, or
# worker: what `make demo` and the README start), or, unlabelled, a test
# image of the project's; the network namespaces made since; the
# processes of the runtime's programs and its test servers (redis-server,
# redis-sentinel, dockerd, containerd, etcd, worker-*, stub-model) started
# since, but for the engine `make setup` serves (/var/run/docker.sock)
# and the project's own Redis (/var/lib/agentvisor). Two runs of make
# test at once on one engine would take each other's for leftovers: the
# tests share the engine's lock (testkit) for that reason too. Worker
# images are a cache: the 30 newest of a day are kept, the others no
# container uses go, and the project's untagged layers.
set -uo pipefail
dry=${LEFTOVERS_DRY_RUN:-}
# run runs a removal, unless this is a dry run.
run() { [ -n "$dry" ] || "$@" >/dev/null 2>&1; }

mode=${1:-}
file=${2:-}
[ -n "$mode" ] && [ -n "$file" ] || { echo "usage: $0 mark|check FILE" >&2; exit 2; }

programs='^(redis-server|redis-sentinel|dockerd|containerd|etcd|worker-manager|worker-gateway|worker-wrapper|stub-model|fakeagent)$'

# processes prints "pid start-epoch comm" of the processes named above.
processes() {
  local hz boot
  hz=$(getconf CLK_TCK)
  boot=$(awk '/^btime/ {print $2}' /proc/stat)
  for d in /proc/[0-9]*; do
    local pid=${d#/proc/} stat comm rest start
    stat=$(cat "$d/stat" 2>/dev/null) || continue
    comm=${stat#*(}; comm=${comm%%)*}
    [[ $comm =~ $programs ]] || continue
    rest=${stat##*) }
    start=$(echo "$rest" | awk '{print $20}')
    echo "$pid $((boot + start / hz)) $comm"
  done
}

case $mode in
mark)
  {
    echo "since $(date +%s)"
    ip netns list 2>/dev/null | awk '{print "netns " $1}'
    processes | awk '{print "proc " $1}'
  } >"$file"
  exit 0
  ;;
check) ;;
*) echo "usage: $0 mark|check FILE" >&2; exit 2 ;;
esac

[ -f "$file" ] || { echo "leftovers: no mark file $file" >&2; exit 2; }
since=$(awk '$1 == "since" {print $2}' "$file")
left=()

deployment=${WORKER_KEY_PREFIX:-worker}
ours_container() { # id: made by the run's tests?
  local prefix image
  prefix=$(docker inspect -f '{{index .Config.Labels "io.agentvisor.key_prefix"}}' "$1" 2>/dev/null)
  if [ -n "$prefix" ]; then
    [ "$prefix" != "$deployment" ]
    return
  fi
  image=$(docker inspect -f '{{.Config.Image}}' "$1" 2>/dev/null)
  [[ $image =~ ^(agentvisor/|worker:|worker-base) ]]
}

if docker info >/dev/null 2>&1; then
  for id in $(docker ps -aq --no-trunc); do
    created=$(docker inspect -f '{{.Created}}' "$id" 2>/dev/null) || continue
    [ "$(date -d "$created" +%s)" -ge "$since" ] || continue
    ours_container "$id" || continue
    name=$(docker inspect -f '{{.Name}} {{.State.Status}} {{.Config.Image}} {{index .Config.Labels "io.agentvisor.role"}} {{index .Config.Labels "io.agentvisor.key_prefix"}}' "$id" 2>/dev/null)
    left+=("container ${id:0:12} $name")
    run docker rm -f "$id"
  done
  for v in $(docker volume ls -q); do
    created=$(docker volume inspect -f '{{.CreatedAt}}' "$v" 2>/dev/null) || continue
    [ "$(date -d "$created" +%s)" -ge "$since" ] || continue
    prefix=$(docker volume inspect -f '{{index .Labels "io.agentvisor.key_prefix"}}' "$v" 2>/dev/null)
    [ -n "$prefix" ] && [ "$prefix" != "$deployment" ] || continue
    left+=("volume $v (key prefix $prefix)")
    run docker volume rm -f "$v"
  done
  # The image cache: of the worker images no container uses, those made
  # over a day ago and any past the 30 newest (docker lists the newest
  # first); and the project's untagged layers.
  used=$(docker ps -a --format '{{.Image}}' | sort -u)
  day_ago=$(($(date +%s) - 86400))
  pruned=0 n=0
  while read -r ref created; do
    [ -n "$ref" ] || continue
    n=$((n + 1))
    grep -qxF "$ref" <<<"$used" && continue
    if [ "$n" -le 30 ] && [ "$(date -d "$created" +%s 2>/dev/null || echo "$day_ago")" -ge "$day_ago" ]; then
      continue
    fi
    [ -n "$dry" ] || { docker rmi "$ref" >/dev/null 2>&1 && pruned=$((pruned + 1)); }
  done < <(docker images --format '{{.Repository}}:{{.Tag}} {{.CreatedAt}}' | awk '$1 ~ /^worker:/ {print $1, $2, $3, $4}')
  run docker image prune -f --filter label=io.agentvisor.managed
  echo "leftovers: image cache: $pruned worker images removed (over a day old, or past the 30 newest), $(docker images -q worker | wc -l) kept"
fi

for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
  grep -qxF "netns $ns" "$file" && continue
  left+=("network namespace $ns")
  run ip netns delete "$ns"
done

# exempt: the engine make setup serves, its containerd, the project's Redis.
exempt() { # pid comm
  local args parent
  args=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)
  case $2 in
  dockerd) [[ $args != *" -H "* && $args != *"--host"* ]] || [[ $args == *"unix:///var/run/docker.sock"* ]] ;;
  containerd)
    parent=$(awk '{print $4}' "/proc/$1/stat" 2>/dev/null)
    [ -n "$parent" ] && [ "$(cat "/proc/$parent/comm" 2>/dev/null)" = dockerd ] && exempt "$parent" dockerd ;;
  redis-server) [ "$(cat /var/lib/agentvisor/redis/redis.pid 2>/dev/null)" = "$1" ] ;; # scripts/redis.sh's
  *) return 1 ;;
  esac
}

while read -r pid start comm; do
  [ -n "$pid" ] || continue
  grep -qxF "proc $pid" "$file" && continue
  [ "$start" -ge "$since" ] || continue
  exempt "$pid" "$comm" && continue
  grep -qE 'docker|kubepods|containerd' "/proc/$pid/cgroup" 2>/dev/null && continue # a container's: gone with it
  left+=("process $pid $comm ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120))")
  run kill -9 "$pid"
done < <(processes)

if [ ${#left[@]} -gt 0 ]; then
  echo "leftovers: the run left ${#left[@]} things of its own$([ -n "$dry" ] && echo " (a dry run: kept)" || echo " (removed now)"):"
  printf '  %s\n' "${left[@]}"
  exit 1
fi
echo "leftovers: none (containers, volumes, network namespaces, processes)"
