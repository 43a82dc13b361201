#!/usr/bin/env bash
# A Kubernetes cluster of one node on this machine, for the project's tests
# (run as root).
#
#   scripts/k8s.sh up      start it (make k8s); idempotent: what runs is kept
#   scripts/k8s.sh down    stop it and remove all it made (make k8s-down)
#   scripts/k8s.sh status  say what runs
#   scripts/k8s.sh load IMAGE...  import images of the Docker engine into
#                          the running cluster's containerd (as up loads
#                          the worker images): images/build-services.sh's
#   scripts/k8s.sh node2 up|kill|down  a second node on this machine (a
#                          kubelet and a containerd of its own): start it,
#                          lose it (every process of it SIGKILLed, as a
#                          machine lost), remove it (down removes it too)
#
# It starts, each as a process of its own with its own pid file and log:
# etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager,
# kube-scheduler (built by scripts/k8s-build.sh from the Go module proxy,
# cached in .cache/k8s), a containerd of its own (Debian's, its own
# config, socket, root and state: never Docker's containerd) and a kubelet.
# Everything listens on loopback, but the kubelet, which listens on the
# node's address (a node's address cannot be loopback): a second address
# of the pod bridge, outside the pod subnet, which pods have no route to. Pods get addresses on a bridge of their own with no route
# beyond it: no default route in the pods, no masquerade, no iptables rule. Images come from the
# Docker engine (docker save | ctr import), never from a registry; the pods'
# sandbox image is the project's own pause program (k8s/cmd/k8s-pause).
#
# What it changes outside its own folders, and gives back on `down`: the
# kubelet sets vm.overcommit_memory, kernel.panic and kernel.panic_on_oops
# (it has no mode that leaves them be); `up` writes down their values
# first and `down` puts them back. Cgroups under /kubepods; the pod bridge;
# CNI's result cache (/var/lib/cni/results/agentvisor-k8s-*); the shims'
# sockets in /run/containerd/s (named by a hash of our containerd's socket).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf 'k8s: %s\n' "$*"; }
die() { printf 'k8s: %s\n' "$*" >&2; exit 1; }

K8S_VERSION=${K8S_VERSION:-v1.37.2}
BIN=${K8S_CACHE:-$ROOT/.cache/k8s}/$K8S_VERSION/bin
DATA=/var/lib/agentvisor-k8s
RUN=/run/agentvisor-k8s
LOGS=$DATA/log
PKI=$DATA/pki
KUBECONFIG_ADMIN=$DATA/admin.kubeconfig
CONTAINERD_SOCK=$RUN/containerd.sock

# Loopback ports, none of them a default of any component (checked free
# before the first start).
ETCD_PORT=23790
ETCD_PEER_PORT=23800
APISERVER_PORT=16443
CONTROLLER_MANAGER_PORT=17257
SCHEDULER_PORT=17259
KUBELET_PORT=17250
KUBELET_HEALTHZ_PORT=17248
CRI_STREAM_PORT=17010

# The pod network: a bridge of its own whose address is the node's; pods
# get 10.213.0.2-254 and no route but their own subnet. Services get
# addresses from 10.214.0.0/24, which nothing routes (no kube-proxy).
BRIDGE=avk8s0
# The node's address: a second address of the bridge, outside POD_CIDR,
# so that no pod reaches the kubelet's API (a pod's one route is its
# subnet).
NODE_IP=10.213.1.1
POD_CIDR=10.213.0.0/24
BRIDGE_IP=10.213.0.1
SERVICE_CIDR=10.214.0.0/24
NODE_NAME=agentvisor-k8s
CNI_NETWORK=agentvisor-k8s

# A second node on this machine (scripts/k8s.sh node2 up), for the tests
# of a node lost: a kubelet and a containerd of its own (two kubelets on
# one containerd would remove each other's containers), its own root,
# ports, cgroup root and pod bridge. Its files are under $DATA/node2 and
# $RUN/node2.
NODE2_NAME=agentvisor-k8s-2
NODE2_BRIDGE=avk8s1
NODE2_POD_CIDR=10.213.2.0/24
NODE2_BRIDGE_IP=10.213.2.1
NODE2_IP=10.213.3.1
NODE2_KUBELET_PORT=17251
NODE2_KUBELET_HEALTHZ_PORT=17249
NODE2_CRI_STREAM_PORT=17011
NODE2_CGROUP=agentvisor-k8s-2

# node_settings 1|2: the N_* variables write_configs, ctr_k8s and
# load_image read are those of node 1 or node 2.
node_settings() {
  if [ "$1" = 1 ]; then
    N_DATA=$DATA N_RUN=$RUN N_SOCK=$CONTAINERD_SOCK N_NAME=$NODE_NAME N_CNI=$CNI_NETWORK
    N_BRIDGE=$BRIDGE N_BRIDGE_IP=$BRIDGE_IP N_POD_CIDR=$POD_CIDR N_NODE_IP=$NODE_IP
    N_KUBELET_PORT=$KUBELET_PORT N_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT N_STREAM_PORT=$CRI_STREAM_PORT N_CGROUP_ROOT=/
  else
    N_DATA=$DATA/node2 N_RUN=$RUN/node2 N_SOCK=$RUN/node2/containerd.sock N_NAME=$NODE2_NAME N_CNI=$CNI_NETWORK-2
    N_BRIDGE=$NODE2_BRIDGE N_BRIDGE_IP=$NODE2_BRIDGE_IP N_POD_CIDR=$NODE2_POD_CIDR N_NODE_IP=$NODE2_IP
    N_KUBELET_PORT=$NODE2_KUBELET_PORT N_HEALTHZ_PORT=$NODE2_KUBELET_HEALTHZ_PORT N_STREAM_PORT=$NODE2_CRI_STREAM_PORT
    N_CGROUP_ROOT=/$NODE2_CGROUP
  fi
}
node_settings 1

WORKER_IMAGES=${WORKER_IMAGES:-agentvisor/worker-base:latest}
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
COMPONENTS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet)

[ "$(id -u)" = 0 ] || die "must run as root (it starts containerd and a kubelet)"

# --- processes ---------------------------------------------------------------
pidfile() { echo "$RUN/$1.pid"; }

# running NAME: the pid of NAME's process if it is alive and still the
# program its pid file was written for.
running() {
  local pf pid exe
  pf=$(pidfile "$1")
  [ -f "$pf" ] || return 1
  pid=$(cat "$pf")
  [ -d "/proc/$pid" ] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "$(basename "${exe% (deleted)}")" = "$(cat "$pf.exe" 2>/dev/null)" ] || return 1
  echo "$pid"
}

# start NAME PROGRAM ARGS...: start PROGRAM in a session of its own unless
# NAME runs already.
start() {
  local name=$1 pid; shift
  if pid=$(running "$name"); then
    log "$name runs (pid $pid)"
    return 0
  fi
  log "starting $name (log: $LOGS/$name.log)"
  setsid nohup "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$(pidfile "$name")"
  basename "$(readlink -f "$(command -v "$1")")" >"$(pidfile "$name").exe"
}

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds, or fail with the
# component's last log lines.
wait_for() {
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 "$secs"); do
    "$@" >/dev/null 2>&1 && return 0
    if ! running "$what" >/dev/null; then
      tail -n 30 "$LOGS/$what.log" >&2 || true
      die "$what exited (log: $LOGS/$what.log)"
    fi
    sleep 1
  done
  tail -n 30 "$LOGS/$what.log" >&2 || true
  die "$what did not answer within $secs s (log: $LOGS/$what.log)"
}

# stop NAME: TERM, then KILL after 20 s.
stop() {
  local pid
  pid=$(running "$1") || { rm -f "$(pidfile "$1")" "$(pidfile "$1").exe"; return 0; }
  log "stopping $1 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do [ -d "/proc/$pid" ] || break; sleep 0.5; done
  if [ -d "/proc/$pid" ]; then
    log "$1 did not stop within 20 s: KILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$(pidfile "$1")" "$(pidfile "$1").exe"
}

port_free() { ! ss -Hltn "sport = :$1" | grep -q .; }

kubectl_admin() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" --request-timeout=10s "$@"; }
ctr_k8s() { ctr --address "$N_SOCK" --namespace k8s.io "$@"; }

# --- the certificates and kubeconfigs ---------------------------------------------
# cert NAME SUBJECT EXTENSIONS: a key and a certificate signed by the
# cluster's CA, made once.
cert() {
  local name=$1 subj=$2 ext=$3
  [ -f "$PKI/$name.crt" ] && return 0
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 365 -out "$PKI/$name.crt" -extfile <(printf '%b' "$ext") 2>/dev/null
  rm -f "$PKI/$name.csr"
}

CLIENT_EXT='basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n'

make_pki() {
  mkdir -p "$PKI"; chmod 0700 "$PKI"
  [ -f "$PKI/ca.crt" ] && [ -f "$PKI/sa.key" ] && [ -f "$PKI/admin.crt" ] && return 0
  log "making the cluster's CA and certificates ($PKI)"
  if [ ! -f "$PKI/ca.crt" ]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 3650 -subj /CN=agentvisor-k8s-ca \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  fi
  local client=$CLIENT_EXT
  cert apiserver /CN=kube-apiserver "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,IP:${SERVICE_CIDR%.0/24}.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
  cert apiserver-kubelet-client /CN=kube-apiserver-kubelet-client/O=system:masters "$client"
  cert controller-manager /CN=system:kube-controller-manager "$client"
  cert scheduler /CN=system:kube-scheduler "$client"
  cert kubelet "/CN=system:node:$NODE_NAME/O=system:nodes" "$client"
  cert admin /CN=agentvisor-admin/O=system:masters "$client"
  [ -f "$PKI/sa.key" ] || openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
}

# kubeconfig NAME CERT: a kubeconfig for the API server on loopback with
# the client certificate CERT.
kubeconfig() {
  local out=$DATA/$1.kubeconfig
  cat >"$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agentvisor-k8s
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: agentvisor-k8s
  context: {cluster: agentvisor-k8s, user: $1}
current-context: agentvisor-k8s
EOF
  chmod 0600 "$out.tmp"; mv "$out.tmp" "$out"
}

# --- the configuration files ------------------------------------------------
# put FILE: standard input into FILE, by a rename (containerd watches the
# CNI folder and would read a half-written file), and only when it differs.
# Says whether it changed: 0 changed, 1 the same.
put() {
  cat >"$1.tmp"
  if cmp -s "$1.tmp" "$1"; then rm -f "$1.tmp"; return 1; fi
  mv "$1.tmp" "$1"
}

# write_configs PAUSE_IMAGE: containerd's, the CNI network's and the
# kubelet's configuration of the node node_settings chose. CONTAINERD_CHANGED is 1 when containerd's
# changed (a running containerd must be restarted to read it).
write_configs() {
  local pause_image=$1
  mkdir -p "$N_DATA/cni/net.d" "$N_DATA/cni/ipam" "$N_DATA/kubelet" "$N_DATA/pod-logs" "$N_DATA/containerd-opt"
  CONTAINERD_CHANGED=0
  put "$N_DATA/containerd.toml" <<EOF && CONTAINERD_CHANGED=1
# Written by scripts/k8s.sh: the cluster's own containerd (not Docker's).
version = 2
root = "$N_DATA/containerd"
state = "$N_RUN/containerd"
[grpc]
  address = "$N_SOCK"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$N_DATA/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # This machine refuses a negative oom_score_adj: without this every pod
  # sandbox fails in runc ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "$N_STREAM_PORT"
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$N_RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$N_DATA/cni/net.d"
    max_conf_num = 1
EOF
  # isGateway false: the bridge's address is set here, not by the plugin,
  # which would otherwise also turn on IP forwarding. No route is handed to
  # the pods: they reach their subnet and nothing else.
  put "$N_DATA/cni/net.d/10-$N_CNI.conflist" <<EOF || true
{
  "cniVersion": "0.4.0",
  "name": "$N_CNI",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$N_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$N_POD_CIDR", "gateway": "$N_BRIDGE_IP"}]],
        "dataDir": "$N_DATA/cni/ipam"
      }
    }
  ]
}
EOF
  put "$N_DATA/kubelet.yaml" <<EOF || true
# Written by scripts/k8s.sh.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $N_NODE_IP
port: $N_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $N_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
cgroupRoot: $N_CGROUP_ROOT
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$N_SOCK
# This machine has cgroup v1, which the kubelet refuses unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
makeIPTablesUtilChains: false
hairpinMode: none
podCIDR: $N_POD_CIDR
# A pod has no pids limit of its own in the API: the node bounds each
# pod's processes (the manager's WORKER_PIDS_LIMIT default, 512).
podPidsLimit: 512
podLogsDir: $N_DATA/pod-logs
resolvConf: ""
# The disk is shared with other work: neither evict pods nor collect the
# images loaded from Docker (they cannot be pulled back) when it fills.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
rotateCertificates: false
serverTLSBootstrap: false
EOF
}

# --- images -----------------------------------------------------------------------
# The pause image: the static k8s-pause in an image of one file, tagged by
# the binary's hash, imported into Docker (so that `docker save` hands it
# over like any other image). Sets PAUSE_IMAGE.
pause_image() {
  local dir
  dir=$(mktemp -d /tmp/agentvisor-k8s-pause.XXXXXX)
  mkdir -p "$dir/rootfs"
  (cd "$ROOT/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$dir/rootfs/pause" ./cmd/k8s-pause) || die "build k8s-pause"
  PAUSE_IMAGE=agentvisor/k8s-pause:$(sha256sum "$dir/rootfs/pause" | cut -c1-12)
  if ! docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1; then
    log "docker import $PAUSE_IMAGE (k8s/cmd/k8s-pause)"
    tar -C "$dir/rootfs" -c . | docker import --change 'ENTRYPOINT ["/pause"]' \
      --change 'LABEL io.agentvisor.managed=true io.agentvisor.image=k8s-pause' - "$PAUSE_IMAGE" >/dev/null
  fi
  rm -rf "$dir"
}

# load_image TAG: docker save | ctr import, unless the same image (by its
# Docker id) went in already.
load_image() {
  local tag=$1 id mark
  id=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null) || die "image $tag is not in Docker (make images builds worker-base)"
  mark=$N_DATA/images/$(echo "$tag" | tr '/:' '__').id
  local have
  have=$(ctr_k8s images ls -q)
  if [ "$(cat "$mark" 2>/dev/null)" = "$id" ] && grep -qx "docker.io/$tag" <<<"$have"; then
    log "image $tag is loaded"
    return 0
  fi
  log "loading $tag into the cluster's containerd (docker save | ctr import)"
  mkdir -p "$N_DATA/images"
  docker save "$tag" | ctr_k8s images import - >/dev/null
  echo "$id" >"$mark"
}

# make_bridge: the pod bridge of the node node_settings chose, with the
# node's address; pods are plugged into it by the CNI bridge plugin.
make_bridge() {
  if ! ip link show "$N_BRIDGE" >/dev/null 2>&1; then
    ip route | grep -q "^${N_POD_CIDR%/*}" && die "$N_POD_CIDR is routed on this machine already"
    log "making the pod bridge $N_BRIDGE ($N_BRIDGE_IP on $N_POD_CIDR, no route beyond it)"
    ip link add "$N_BRIDGE" type bridge
    ip addr add "$N_BRIDGE_IP/${N_POD_CIDR#*/}" dev "$N_BRIDGE"
    ip link set "$N_BRIDGE" up
  fi
  if ! ip -o addr show dev "$N_BRIDGE" | grep -q " $N_NODE_IP/32 "; then
    log "giving the bridge the node's address $N_NODE_IP/32 (the kubelet's, outside $N_POD_CIDR: no pod has a route to it)"
    ip addr add "$N_NODE_IP/32" dev "$N_BRIDGE"
  fi
}

# remove_bridge: the pod bridge of the node node_settings chose, and the
# pods' ends of it left.
remove_bridge() {
  ip link show "$N_BRIDGE" >/dev/null 2>&1 || return 0
  local veth
  for veth in $(ip -o link show master "$N_BRIDGE" | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$veth" 2>/dev/null || true
  done
  log "removing the pod bridge $N_BRIDGE"
  ip link del "$N_BRIDGE"
}

# forget_cni: CNI's result cache of the node node_settings chose: its
# network's entries, and containerd's loopback entries of its sandboxes
# (named by their ids); a pod taken down by its kubelet has left none.
forget_cni() {
  rm -f /var/lib/cni/results/"$N_CNI"-* 2>/dev/null || true
  local sb
  for sb in "$N_RUN"/containerd/io.containerd.grpc.v1.cri/sandboxes/*; do
    [ -d "$sb" ] && rm -f "/var/lib/cni/results/cni-loopback-$(basename "$sb")-lo"
  done
  return 0
}

# --- up ----------------------------------------------------------------------------
up() {
  local t0=$SECONDS
  # Packages: Debian's etcd and CNI plugins (containerd and runc come with
  # docker.io). Their services are not started: a policy-rc.d that says no
  # is put in place when there is none.
  local missing=()
  command -v etcd >/dev/null || missing+=(etcd-server)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing with apt-get: ${missing[*]} (their services are not started)"
    local policy=/usr/sbin/policy-rc.d had=1
    [ -e "$policy" ] || { had=0; printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ $had = 1 ] || rm -f "$policy"
  fi

  bash scripts/k8s-build.sh

  mkdir -p "$DATA" "$RUN" "$LOGS"
  if ! running etcd >/dev/null; then
    for p in $ETCD_PORT $ETCD_PEER_PORT $APISERVER_PORT $CONTROLLER_MANAGER_PORT $SCHEDULER_PORT $KUBELET_PORT $KUBELET_HEALTHZ_PORT $CRI_STREAM_PORT; do
      port_free "$p" || die "port $p is taken by another program: $(ss -Hltnp "sport = :$p" | head -1)"
    done
  fi
  make_pki
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kubelet kubelet

  # The pod bridge, with the node's address; pods are plugged into it by
  # the CNI bridge plugin.
  make_bridge

  start etcd etcd --name agentvisor-k8s --data-dir "$DATA/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "agentvisor-k8s=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

  # The API server's audit log keeps the requests of service accounts
  # (a worker-manager runs as one): how many a manager makes at rest is
  # read from it (k8s/bench_test.go). Nothing else is logged.
  put "$DATA/audit-policy.yaml" <<EOF || true
# Written by scripts/k8s.sh.
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
EOF
  # The endpoint reconciler would refuse an advertised address on loopback.
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --endpoint-reconciler-type none \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --audit-policy-file "$DATA/audit-policy.yaml" --audit-log-path "$LOGS/audit.log" \
    --audit-log-format json --audit-log-maxsize 100 --audit-log-maxbackup 1 \
    --profiling=false
  wait_for kube-apiserver 120 kubectl_admin get --raw /readyz

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$DATA/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$DATA/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$DATA/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CONTROLLER_MANAGER_PORT" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials --leader-elect=false --profiling=false
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$DATA/scheduler.kubeconfig" \
    --authentication-kubeconfig "$DATA/scheduler.kubeconfig" \
    --authorization-kubeconfig "$DATA/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false --profiling=false

  pause_image
  write_configs "$PAUSE_IMAGE"
  if [ "$CONTAINERD_CHANGED" = 1 ] && running containerd >/dev/null; then
    log "containerd's configuration changed: restarting it (its containers go on)"
    stop containerd
  fi
  start containerd containerd --config "$DATA/containerd.toml"
  wait_for containerd 30 ctr --address "$CONTAINERD_SOCK" version
  load_image "$PAUSE_IMAGE"
  for img in $WORKER_IMAGES; do load_image "$img"; done

  # The kubelet changes these kernel settings when it starts; their values
  # from before the first start are given back by `down`.
  if [ ! -f "$DATA/sysctl.before" ]; then
    for s in "${SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$DATA/sysctl.before"
  fi
  start kubelet "$BIN/kubelet" --config "$DATA/kubelet.yaml" --kubeconfig "$DATA/kubelet.kubeconfig" \
    --root-dir "$DATA/kubelet" --cert-dir "$DATA/kubelet/pki" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"
  log "waiting for the node $NODE_NAME to be Ready"
  wait_for kubelet 120 kubectl_admin wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
  wait_for kube-controller-manager 60 kubectl_admin get serviceaccount default -n default

  # What a test or a client needs to know of this cluster, in one file.
  cat >"$RUN/cluster.env" <<EOF
KUBECONFIG=$KUBECONFIG_ADMIN
KUBECTL=$BIN/kubectl
NODE_NAME=$NODE_NAME
POD_CIDR=$POD_CIDR
BRIDGE=$BRIDGE
BRIDGE_IP=$BRIDGE_IP
NODE_IP=$NODE_IP
AUDIT_LOG=$LOGS/audit.log
SERVICE_CIDR=$SERVICE_CIDR
APISERVER_PORT=$APISERVER_PORT
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
CONTROLLER_MANAGER_PORT=$CONTROLLER_MANAGER_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KUBELET_PORT=$KUBELET_PORT
KUBELET_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT
CRI_STREAM_PORT=$CRI_STREAM_PORT
CONTAINERD_SOCK=$CONTAINERD_SOCK
WORKER_BASE_IMAGE=${WORKER_IMAGES%% *}
EOF
  log "the cluster is up ($(( SECONDS - t0 )) s); its settings: $RUN/cluster.env"
  cat <<EOF

  export KUBECONFIG=$KUBECONFIG_ADMIN
  export PATH=$BIN:\$PATH        # kubectl $K8S_VERSION
  kubectl get nodes

  Images come from Docker, never a registry: use imagePullPolicy: Never
  (WORKER_IMAGES="agentvisor/worker-base:latest worker:<tag>" make k8s loads more).
  Pods get addresses on $POD_CIDR ($BRIDGE) and no route beyond it.
  Logs: $LOGS.  Stop it and remove all of it: make k8s-down
EOF
}

# --- down --------------------------------------------------------------------------
# unmount_under DIR: every mount under DIR, deepest first.
unmount_under() {
  local m
  awk -v d="$1/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
}

down() {
  node2_down
  if running kube-apiserver >/dev/null && running kubelet >/dev/null && running containerd >/dev/null; then
    # Through the kubelet, so that each sandbox's network is taken down by
    # its CNI plugin.
    log "deleting every pod"
    kubectl_admin delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
    for _ in $(seq 1 30); do
      [ -z "$(ctr_k8s tasks ls -q 2>/dev/null)" ] && break
      sleep 1
    done
  fi
  local c
  for c in kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
  if running containerd >/dev/null; then
    local id
    for id in $(ctr_k8s tasks ls -q 2>/dev/null); do
      log "killing the container $id"
      ctr_k8s tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
      sleep 0.5
      ctr_k8s tasks delete -f "$id" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  # The shims of our containerd, if any outlived it: found by its socket
  # on their command line, which no other containerd has.
  local pid
  for pid in $(grep -lsaF -- "$CONTAINERD_SOCK" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == */containerd-shim* ]] || continue
    log "killing the left-over shim $pid"
    kill -KILL "$pid" 2>/dev/null || true
  done
  unmount_under "$RUN"
  unmount_under "$DATA"
  remove_bridge
  forget_cni
  rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  local d
  for d in /sys/fs/cgroup/*/kubepods; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  if [ -f "$DATA/sysctl.before" ]; then
    log "giving back the kernel settings the kubelet changed"
    local line
    while read -r line; do sysctl -qw "$line" || true; done <"$DATA/sysctl.before"
  fi
  if [ -d "$LOGS" ]; then
    rm -rf "$ROOT/.cache/k8s/logs"; mkdir -p "$ROOT/.cache/k8s"
    cp -r "$LOGS" "$ROOT/.cache/k8s/logs"
    log "the components' logs are kept in .cache/k8s/logs"
  fi
  [ -d "$DATA" ] || [ -d "$RUN" ] && log "removing $DATA and $RUN"
  rm -rf "$DATA" "$RUN"
  local img
  for img in $(docker images -q --filter label=io.agentvisor.image=k8s-pause 2>/dev/null | sort -u); do
    docker rmi -f "$img" >/dev/null 2>&1 || true
  done
  log "the cluster is down"
}

# --- node 2 ------------------------------------------------------------------------
# node2_up: the second node, beside a running cluster: its containerd
# (with the pause image and WORKER_IMAGES loaded) and its kubelet, its
# pods under the cgroup /agentvisor-k8s-2 of every hierarchy. Idempotent.
node2_up() {
  running kube-apiserver >/dev/null || die "the cluster does not run (make k8s)"
  node_settings 2
  mkdir -p "$N_DATA" "$N_RUN"
  if ! running kubelet-2 >/dev/null; then
    for p in $N_KUBELET_PORT $N_HEALTHZ_PORT $N_STREAM_PORT; do
      port_free "$p" || die "port $p is taken by another program: $(ss -Hltnp "sport = :$p" | head -1)"
    done
  fi
  cert kubelet-2 "/CN=system:node:$N_NAME/O=system:nodes" "$CLIENT_EXT"
  kubeconfig kubelet-2 kubelet-2
  make_bridge
  # The kubelet refuses a cgroup root that does not exist. A cpuset
  # cgroup admits no process until it has CPUs and memory nodes: its
  # parent's.
  local d
  for d in /sys/fs/cgroup/*/; do
    { [ -L "${d%/}" ] || [ "$(basename "$d")" = unified ]; } && continue
    mkdir -p "$d$NODE2_CGROUP"
    if [ -f "$d/cpuset.cpus" ]; then
      [ -n "$(cat "$d$NODE2_CGROUP/cpuset.cpus")" ] || cat "$d/cpuset.cpus" >"$d$NODE2_CGROUP/cpuset.cpus"
      [ -n "$(cat "$d$NODE2_CGROUP/cpuset.mems")" ] || cat "$d/cpuset.mems" >"$d$NODE2_CGROUP/cpuset.mems"
    fi
  done
  # The pause image node 1 runs its sandboxes with.
  local pause
  pause=$(sed -n 's/^ *sandbox_image = "\(.*\)"$/\1/p' "$DATA/containerd.toml")
  [ -n "$pause" ] || die "no sandbox image in $DATA/containerd.toml"
  write_configs "$pause"
  start containerd-2 containerd --config "$N_DATA/containerd.toml"
  wait_for containerd-2 30 ctr --address "$N_SOCK" version
  load_image "$pause"
  for img in $WORKER_IMAGES; do load_image "$img"; done
  start kubelet-2 "$BIN/kubelet" --config "$N_DATA/kubelet.yaml" --kubeconfig "$DATA/kubelet-2.kubeconfig" \
    --root-dir "$N_DATA/kubelet" --cert-dir "$N_DATA/kubelet/pki" \
    --hostname-override "$N_NAME" --node-ip "$N_NODE_IP"
  log "waiting for the node $N_NAME to be Ready"
  wait_for kubelet-2 120 kubectl_admin wait --for=condition=Ready "node/$N_NAME" --timeout=2s
  cat >"$RUN/node2.env" <<EOF
NODE2_NAME=$N_NAME
NODE2_IP=$N_NODE_IP
NODE2_POD_CIDR=$N_POD_CIDR
NODE2_BRIDGE=$N_BRIDGE
NODE2_CONTAINERD_SOCK=$N_SOCK
NODE2_CGROUP=$NODE2_CGROUP
EOF
  log "node $N_NAME is up; its settings: $RUN/node2.env"
  node_settings 1
}

# node2_kill: the second node lost as a machine is: its kubelet, its
# containerd, their shims and every process of its pods killed (SIGKILL),
# nothing cleaned up. The node object stays (NotReady once the node
# controller notices).
node2_kill() {
  node_settings 2
  local c pid
  for c in kubelet-2 containerd-2; do
    if pid=$(running "$c"); then
      log "killing $c (pid $pid)"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$(pidfile "$c")" "$(pidfile "$c").exe"
  done
  for pid in $(grep -lsaF -- "$N_SOCK" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == */containerd-shim* ]] && kill -KILL "$pid" 2>/dev/null
  done
  local procs=""
  for _ in $(seq 1 20); do
    procs=$(find "/sys/fs/cgroup/pids/$NODE2_CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    [ -z "$procs" ] && break
    # shellcheck disable=SC2086
    kill -KILL $procs 2>/dev/null || true
    sleep 0.5
  done
  [ -z "$procs" ] || log "processes of node 2's pods outlived SIGKILL: $procs"
  node_settings 1
}

# node2_down: the second node stopped and all it made removed, the node
# object too (its pods go with it: the pod garbage collector's).
node2_down() {
  node_settings 2
  if ! running kubelet-2 >/dev/null && ! running containerd-2 >/dev/null && [ ! -d "$N_DATA" ] && [ ! -d "$N_RUN" ]; then
    node_settings 1
    return 0
  fi
  if running kube-apiserver >/dev/null && running kubelet-2 >/dev/null && running containerd-2 >/dev/null; then
    # Through its kubelet, so that each sandbox's network is taken down
    # by its CNI plugin.
    log "deleting node 2's pods"
    kubectl_admin delete pods --all-namespaces --field-selector "spec.nodeName=$N_NAME" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
    for _ in $(seq 1 30); do
      [ -z "$(ctr_k8s tasks ls -q 2>/dev/null)" ] && break
      sleep 1
    done
  fi
  node2_kill
  node_settings 2
  if running kube-apiserver >/dev/null; then
    kubectl_admin delete node "$N_NAME" --ignore-not-found --wait=false >/dev/null || true
  fi
  unmount_under "$N_RUN"
  unmount_under "$N_DATA"
  remove_bridge
  forget_cni
  local d
  for d in /sys/fs/cgroup/*/"$NODE2_CGROUP"; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  log "removing $N_DATA and $N_RUN"
  rm -rf "$N_DATA" "$N_RUN" "$RUN/node2.env" "$DATA/kubelet-2.kubeconfig"
  node_settings 1
}


status() {
  local c pid
  for c in "${COMPONENTS[@]}" containerd-2 kubelet-2; do
    if pid=$(running "$c"); then log "$c runs (pid $pid)"; else log "$c does not run"; fi
  done
}

# The whole script is read before any of it runs (main, then exit on the
# same line): bash reads a script as it goes, so a file rewritten during
# a 20-minute `up` (a checkout, a rebase) would otherwise go on from the
# same byte offset in the new text.
main() {
  case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    load)
      shift
      running containerd >/dev/null || die "the cluster's containerd does not run (make k8s)"
      for img in "$@"; do load_image "$img"; done ;;
    node2)
      case "${2:-}" in
        up) node2_up ;;
        kill) node2_kill ;;
        down) node2_down ;;
        *) die "usage: scripts/k8s.sh node2 up|kill|down" ;;
      esac ;;
    *) die "usage: scripts/k8s.sh up|down|status|load IMAGE...|node2 up|kill|down" ;;
  esac
}

main "$@"; exit
