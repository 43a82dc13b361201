#!/usr/bin/env bash
# What a test run left behind (make test's last step).
#
#   scripts/leftovers.sh mark FILE    before the run: note the time, the
#                                     network namespaces and the processes
#   scripts/leftovers.sh check FILE   after it: what the run made and did
#                                     not remove, removed now; exit 1 if any
#                                     (LEFTOVERS_DRY_RUN=1: only listed)
#
# A run's own: the Docker containers and volumes made since the mark, the
# network namespaces and the processes of the runtime's programs and its
# test servers (redis-server, redis-sentinel, dockerd, etcd, worker-*,
# stub-model) started since. What was there before (a deployment of
# `make demo`, the engine `make setup` started) is never touched. Worker
# images are a cache: those of earlier runs that no container uses go, so
# the cache holds one run's (each run rebuilds what it lacks).
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

if docker info >/dev/null 2>&1; then
  for id in $(docker ps -aq --no-trunc); do
    created=$(docker inspect -f '{{.Created}}' "$id" 2>/dev/null) || continue
    [ "$(date -d "$created" +%s)" -ge "$since" ] || continue
    name=$(docker inspect -f '{{.Name}} {{.State.Status}} {{index .Config.Labels "io.agentvisor.role"}} {{index .Config.Labels "io.agentvisor.key_prefix"}}' "$id" 2>/dev/null)
    left+=("container ${id:0:12} $name")
    run docker rm -f "$id"
  done
  for v in $(docker volume ls -q); do
    created=$(docker volume inspect -f '{{.CreatedAt}}' "$v" 2>/dev/null) || continue
    [ "$(date -d "$created" +%s)" -ge "$since" ] || continue
    left+=("volume $v")
    run docker volume rm -f "$v"
  done
  # The image cache: worker images older than this run that no container
  # uses, and untagged ones (the layers of rebuilt tags).
  used=$(docker ps -a --format '{{.Image}}' | sort -u)
  pruned=0
  while read -r ref created; do
    [ -n "$ref" ] || continue
    [ "$(date -d "$created" +%s 2>/dev/null || echo "$since")" -lt "$since" ] || continue
    grep -qxF "$ref" <<<"$used" && continue
    [ -n "$dry" ] || { docker rmi "$ref" >/dev/null 2>&1 && pruned=$((pruned + 1)); }
  done < <(docker images --format '{{.Repository}}:{{.Tag}} {{.CreatedAt}}' | awk '$1 ~ /^worker:/ {print $1, $2, $3, $4}')
  run docker image prune -f
  echo "leftovers: image cache: $pruned worker images of earlier runs removed, $(docker images -q 'worker' | wc -l) kept"
fi

for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
  grep -qxF "netns $ns" "$file" && continue
  left+=("network namespace $ns")
  run ip netns delete "$ns"
done

while read -r pid start comm; do
  [ -n "$pid" ] || continue
  grep -qxF "proc $pid" "$file" && continue
  [ "$start" -ge "$since" ] || continue
  left+=("process $pid $comm ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120))")
  run kill -9 "$pid"
done < <(processes)

if [ ${#left[@]} -gt 0 ]; then
  echo "leftovers: the run left ${#left[@]} things of its own$([ -n "$dry" ] && echo " (a dry run: kept)" || echo " (removed now)"):"
  printf '  %s\n' "${left[@]}"
  exit 1
fi
echo "leftovers: none (containers, volumes, network namespaces, processes)"
