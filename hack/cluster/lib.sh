# shellcheck shell=bash
# Common settings for the local cluster scripts (sourced, not executed).

CLUSTER_HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLUSTER_HACK_DIR/../.." && pwd)"

# Per-checkout state: kubeconfig, certs, logs, pids, data.
CLUSTER_DIR="${CLUSTER_DIR:-$REPO_ROOT/.cluster}"
# Machine-wide state: the binary cache and a registry of the running cluster
# (so a second checkout can find and stop the cluster of the first one).
TA_CACHE="${TOOLADAPTER_CACHE:-$HOME/.cache/tooladapter}"
TA_RUN="$TA_CACHE/run"

# Pinned versions, read from the wrapper modules.
modver() { awk -v m="$2" '($1==m || ($1=="require" && $2==m)) {print ($1=="require") ? $3 : $2; exit}' "$1"; }
K8S_VERSION="$(modver "$CLUSTER_HACK_DIR/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(modver "$CLUSTER_HACK_DIR/etcd/go.mod" go.etcd.io/etcd/server/v3)"
KUBE_ROUTER_VERSION="$(modver "$CLUSTER_HACK_DIR/kube-router/go.mod" github.com/cloudnativelabs/kube-router/v2)"

# Bump when build.sh changes in a way that changes the binaries.
BUILD_REV=1
build_key() {
  {
    echo "rev=$BUILD_REV go=$(go env GOVERSION 2>/dev/null || echo none)"
    cat "$CLUSTER_HACK_DIR/go.mod" "$CLUSTER_HACK_DIR/go.sum" \
        "$CLUSTER_HACK_DIR/etcd/go.mod" "$CLUSTER_HACK_DIR/etcd/go.sum" \
        "$CLUSTER_HACK_DIR/kube-router/go.mod" "$CLUSTER_HACK_DIR/kube-router/go.sum"
  } | sha256sum | cut -c1-12
}
BIN_DIR="${CLUSTER_BIN_DIR:-$TA_CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kube-router-$KUBE_ROUTER_VERSION-$(build_key)/bin}"
CLUSTER_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd kube-router pause"

# Network layout.
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1
CLUSTER_DNS_IP=10.0.0.10
CLUSTER_CIDR=10.244.0.0/16
POD_CIDR=10.244.0.0/24
APISERVER_PORT="${APISERVER_PORT:-6443}"
ETCD_CLIENT_PORT=2379
ETCD_PEER_PORT=2380
KUBE_ROUTER_HEALTH_PORT=20244
# Ports this cluster listens on (checked before start).
CLUSTER_PORTS="$APISERVER_PORT $ETCD_CLIENT_PORT $ETCD_PEER_PORT 10248 10250 10257 10259 $KUBE_ROUTER_HEALTH_PORT"

# Host state of the running cluster (wiped by down.sh): containerd's and the
# kubelet's directories, CNI IPAM, the CNI config and bridge.
VAR_DIR=/var/lib/tooladapter
RUN_DIR=/run/tooladapter
CONTAINERD_SOCK="$RUN_DIR/containerd/containerd.sock"
CNI_CONF=/etc/cni/net.d/10-tooladapter.conflist
CNI_BRIDGE=tooladapter0

# Components in start order; each is a process recorded by pid.
COMPONENTS="containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-router"

# component_pid NAME [PIDDIR]: the recorded pid of NAME if that process is
# still alive and still runs the NAME binary (pids can be reused).
component_pid() {
  local name="$1" dir="${2:-$TA_RUN/pids}" pid exe
  pid="$(cat "$dir/$name.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  [ "$(basename "${exe% (deleted)}")" = "$name" ] || return 1
  echo "$pid"
}
# proc_alive PID: the process exists and is not a zombie (PID 1 here may be
# slow to reap the orphans it inherits).
proc_alive() {
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
component_running() { component_pid "$1" >/dev/null; }

# Images (built locally, imported into containerd's k8s.io namespace).
PAUSE_IMAGE="localhost/tooladapter-pause:dev"
SANDBOX_IMAGE="localhost/tooladapter-sandbox:dev"

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# node_ip: the IPv4 address of the interface that holds the default route
# (falls back to the first global address).
node_ip() {
  local dev ip
  dev="$(ip -4 route show default 2>/dev/null | awk '{for(i=1;i<NF;i++) if($i=="dev"){print $(i+1); exit}}')"
  if [ -n "$dev" ]; then
    ip="$(ip -4 -o addr show dev "$dev" scope global | awk '{split($4,a,"/"); print a[1]; exit}')"
  fi
  if [ -z "${ip:-}" ]; then
    ip="$(ip -4 -o addr show scope global | awk '{split($4,a,"/"); print a[1]; exit}')"
  fi
  [ -n "$ip" ] || die "cannot determine the node IP address"
  echo "$ip"
}

node_name() { hostname | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9.\n-' '-'; }

# wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND...: poll COMMAND until it succeeds.
wait_for() {
  local what="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "timed out after ${timeout}s waiting for: $what"
      return 1
    fi
    sleep 0.5
  done
}
