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
COREDNS_VERSION="$(modver "$CLUSTER_HACK_DIR/coredns/go.mod" github.com/coredns/coredns)"
LOCAL_PATH_VERSION="$(modver "$CLUSTER_HACK_DIR/local-path/go.mod" github.com/rancher/local-path-provisioner)"
HELM_VERSION="$(modver "$CLUSTER_HACK_DIR/helm/go.mod" helm.sh/helm/v3)"
GVISOR_VERSION="$(modver "$CLUSTER_HACK_DIR/gvisor/go.mod" gvisor.dev/gvisor)"

GO_VERSION="$(go env GOVERSION 2>/dev/null || echo none)"
# Bump when build.sh changes in a way that changes the binaries.
BUILD_REV=1
build_key() {
  {
    echo "rev=$BUILD_REV go=$GO_VERSION"
    cat "$CLUSTER_HACK_DIR/go.mod" "$CLUSTER_HACK_DIR/go.sum" \
        "$CLUSTER_HACK_DIR/etcd/go.mod" "$CLUSTER_HACK_DIR/etcd/go.sum" \
        "$CLUSTER_HACK_DIR/kube-router/go.mod" "$CLUSTER_HACK_DIR/kube-router/go.sum"
  } | sha256sum | cut -c1-12
}
BIN_DIR="${CLUSTER_BIN_DIR:-$TA_CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kube-router-$KUBE_ROUTER_VERSION-$(build_key)/bin}"
CLUSTER_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy etcd kube-router pause"

# Add-on binaries (issue 15), each built from its own wrapper module under
# hack/cluster/<module>/ into its own cache dir, keyed by that module alone:
# bumping one rebuilds only it, and never moves $BIN_DIR (which would make
# up.sh restart a running cluster). runsc and its containerd shim (the RuntimeClass
# gvisor, addons/gvisor.sh) come from one module, hack/cluster/gvisor.
ADDON_BINARIES="coredns local-path-provisioner helm runsc containerd-shim-runsc-v1"
addon_module() {
  case "$1" in
    coredns) echo coredns ;;
    local-path-provisioner) echo local-path ;;
    helm) echo helm ;;
    runsc|containerd-shim-runsc-v1) echo gvisor ;;
    *) die "unknown add-on binary $1" ;;
  esac
}
addon_version() {
  case "$1" in
    coredns) echo "$COREDNS_VERSION" ;;
    local-path-provisioner) echo "$LOCAL_PATH_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    runsc|containerd-shim-runsc-v1) echo "$GVISOR_VERSION" ;;
  esac
}
# Bump when build.sh builds an add-on differently.
ADDON_BUILD_REV=1
# addon_bin NAME: the cached path of add-on binary NAME.
addon_bin() {
  local dir key
  dir="$CLUSTER_HACK_DIR/$(addon_module "$1")"
  key="$({ echo "rev=$ADDON_BUILD_REV go=$GO_VERSION"
           # helm's default Kubernetes version (build.sh) is the cluster's.
           [ "$1" != helm ] || echo "kube=$K8S_VERSION"
           cat "$dir/go.mod" "$dir/go.sum"
           # *.py: the gvisor shim's build-time patch (gvisor/patch.py).
           for f in "$dir"/*.go "$dir"/*.py; do [ ! -f "$f" ] || cat "$f"; done; } | sha256sum | cut -c1-12)"
  echo "$TA_CACHE/addons/$1-$(addon_version "$1")-$key/$1"
}
# addon_image NAME: the local image of an in-cluster add-on, tagged with a key
# of its binary and the image scripts: a rebuilt image rolls its Deployment.
addon_image() {
  local key
  key="$({ dirname "$(addon_bin "$1")"; cat "$CLUSTER_HACK_DIR/mkimage.py" "$CLUSTER_HACK_DIR/addons/image.py"; } \
    | sha256sum | cut -c1-12)"
  echo "localhost/tooladapter-$1:$key"
}

# Network layout.
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1
CLUSTER_DNS_IP=10.0.0.10
CLUSTER_DOMAIN=cluster.local
CLUSTER_CIDR=10.244.0.0/16
POD_CIDR=10.244.0.0/24
APISERVER_PORT="${APISERVER_PORT:-6443}"
ETCD_CLIENT_PORT=2379
ETCD_PEER_PORT=2380
KUBE_ROUTER_HEALTH_PORT=20244
KUBE_PROXY_HEALTH_PORT=10256
KUBE_PROXY_METRICS_PORT=10249
# Ports this cluster listens on (checked before start).
CLUSTER_PORTS="$APISERVER_PORT $ETCD_CLIENT_PORT $ETCD_PEER_PORT 10248 10250 10257 10259 $KUBE_ROUTER_HEALTH_PORT"
CLUSTER_PORTS+=" $KUBE_PROXY_HEALTH_PORT $KUBE_PROXY_METRICS_PORT"

# Host state of the running cluster (wiped by down.sh): containerd's and the
# kubelet's directories, CNI IPAM, the CNI config and bridge.
VAR_DIR=/var/lib/tooladapter
RUN_DIR=/run/tooladapter
CONTAINERD_SOCK="$RUN_DIR/containerd/containerd.sock"
CNI_CONF=/etc/cni/net.d/10-tooladapter.conflist
CNI_BRIDGE=tooladapter0
LOCAL_PATH_DIR="$VAR_DIR/local-path"

# Components in start order; each is a process recorded by pid. A missing
# core component makes up.sh restart the cluster; a missing add-on process is
# only started (so a running cluster gains add-ons without a restart).
COMPONENTS="containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-router"
ADDON_COMPONENTS="kube-proxy docker-registry"
# In-cluster add-ons: Deployments (namespace/name), and where local-path
# keeps the volumes' directories on the node (wiped with $VAR_DIR).
COREDNS_DEPLOYMENT=kube-system/coredns
LOCAL_PATH_DEPLOYMENT=local-path-storage/local-path-provisioner

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

# The node's image registry (addons/registry.sh): Debian's docker-registry as a
# host process on the node's address, plain HTTP; containerd reads one hosts.toml
# per registry host under REGISTRY_HOSTS_DIR (its CRI config_path) at each pull.
# Images pushed there (`make image-push REGISTRY=$NODE_IP:$REGISTRY_PORT`) are
# really pulled (the deploy suite installs from it); its blobs live in $VAR_DIR.
REGISTRY_PORT="${REGISTRY_PORT:-5000}"
REGISTRY_HOSTS_DIR="$CLUSTER_DIR/conf/certs.d"
REGISTRY_DIR="$VAR_DIR/registry"

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

# cluster_dns_answers: CoreDNS answers for the API's Service name through the
# kube-dns Service, asked from the host (so kube-proxy's rules, the pod
# network and CoreDNS all work).
cluster_dns_answers() {
  busybox nslookup "kubernetes.default.svc.$CLUSTER_DOMAIN" "$CLUSTER_DNS_IP" 2>/dev/null \
    | grep -q "Address.*$SERVICE_IP"
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
