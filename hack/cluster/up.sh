#!/usr/bin/env bash
# Bring up (or confirm) the local single-node Kubernetes cluster:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
# kubelet and kube-router (NetworkPolicy firewall), all host processes; then
# its add-ons (addons/addons.sh): kube-proxy, CoreDNS, local-path storage, helm.
#
# Idempotent: when the cluster of this checkout is already healthy it only
# re-checks it and starts any missing add-on. When a core component is
# missing, the half-dead cluster is torn down and started afresh (a few
# seconds with a warm binary cache). When a cluster of another checkout is
# running, it is stopped first.
#
# Needs root. Writes .cluster/kubeconfig, .cluster/env, .cluster/bin/kubectl,
# .cluster/logs/<component>.log and .cluster/pids/<component>.pid.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "the local cluster needs root (containerd, kubelet, iptables)"
T0=$SECONDS

PKI="$CLUSTER_DIR/pki"
CONF="$CLUSTER_DIR/conf"
LOGS="$CLUSTER_DIR/logs"
PIDS="$CLUSTER_DIR/pids"
KUBECONFIG_ADMIN="$CLUSTER_DIR/kubeconfig"
NODE_IP="$(node_ip)"
NODE_NAME="$(node_name)"
# Startup timeouts (seconds).
WAIT_SHORT="${CLUSTER_WAIT_SHORT:-60}"
WAIT_LONG="${CLUSTER_WAIT_LONG:-180}"

# ---------------------------------------------------------------- helpers --

LOCAL_API="https://127.0.0.1:$APISERVER_PORT"
CLIENT_EXT="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

kc() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# write_file FILE [MODE]: replace FILE with stdin, atomically (readers never
# see it half-written), unless it already has that content. Returns 0 when
# FILE changed, 1 when it did not.
write_file() {
  local file="$1" mode="${2:-644}" tmp="$1.tmp.$$"
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$file" ] && cmp -s "$tmp" "$file"; then rm -f "$tmp"; return 1; fi
  mv -f "$tmp" "$file"
}

# cert NAME SUBJECT EXT: an RSA key + certificate signed by the cluster CA.
cert() {
  local name="$1" subj="$2" ext="$3"
  [ -f "$PKI/$name.crt" ] && return 0
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  chmod 600 "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr"
}

# kubeconfig FILE USER SERVER
kubeconfig() {
  local file="$1" user="$2" server="$3"
  write_file "$file" 600 <<EOF || true
apiVersion: v1
kind: Config
clusters:
- name: tooladapter
  cluster:
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
    server: $server
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$user.crt")
    client-key-data: $(base64 -w0 "$PKI/$user.key")
contexts:
- name: tooladapter
  context:
    cluster: tooladapter
    user: $user
    namespace: default
current-context: tooladapter
EOF
}

apiserver_ready() {
  curl -fsS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

healthy() {
  local c
  [ -f "$KUBECONFIG_ADMIN" ] && [ -x "$BIN_DIR/kubectl" ] || return 1
  [ "$(cat "$TA_RUN/owner" 2>/dev/null)" = "$CLUSTER_DIR" ] || return 1
  for c in $COMPONENTS; do component_running "$c" || return 1; done
  apiserver_ready && node_ready
}

# stop_component_pid NAME: stop one running component (SIGTERM, then SIGKILL
# after 10s), e.g. to restart it with a new configuration.
stop_component_pid() {
  local pid i
  pid="$(component_pid "$1")" || return 0
  log "stopping $1 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 100); do proc_alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do proc_alive "$pid" || return 0; sleep 0.1; done
}

# start NAME BINARY ARGS...: start a component in its own session, logging to
# .cluster/logs/NAME.log; record its pid here and in the machine-wide registry.
start() {
  local name="$1"; shift
  log "starting $name"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 8>&- &
  local pid=$!
  echo "$pid" >"$PIDS/$name.pid"
  echo "$pid" >"$TA_RUN/pids/$name.pid"
}

check_alive() {
  local name="$1"
  # Not component_running: right after start the pid may still be setsid.
  proc_alive "$(cat "$PIDS/$name.pid" 2>/dev/null)" && return 0
  log "$name exited; last lines of $LOGS/$name.log:"
  tail -n 30 "$LOGS/$name.log" >&2 || true
  return 1
}

# wait_component NAME DESC TIMEOUT CMD...: like wait_for, but fail fast (with
# the component's log) if the component dies meanwhile.
wait_component() {
  local name="$1" what="$2" timeout="$3"; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    check_alive "$name" || die "$name died while waiting for: $what"
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "last lines of $LOGS/$name.log:"; tail -n 30 "$LOGS/$name.log" >&2 || true
      die "timed out after ${timeout}s waiting for: $what"
    fi
    sleep 0.5
  done
}

# The kubelet's configuration; a function because the add-ons rewrite it
# (cluster DNS) on a running cluster and restart the kubelet.
kubelet_config() {
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupsPerQOS: ${KUBELET_CGROUPS_PER_QOS:-true}
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageServiceEndpoint: unix://$CONTAINERD_SOCK
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
maxPods: 110
serializeImagePulls: false
resolvConf: /etc/resolv.conf
# Pods resolve through CoreDNS (addons/coredns.yaml) at the kube-dns Service.
clusterDNS: [$CLUSTER_DNS_IP]
clusterDomain: $CLUSTER_DOMAIN
registerNode: true
shutdownGracePeriod: 0s
# No CAP_SYS_RESOURCE here: the kubelet cannot lower its own OOM score.
oomScoreAdj: 0
EOF
}

# containerd's configuration; a function because the add-ons compare it with the
# running one (ensure_containerd_config) on a running cluster.
containerd_config() {
  cat <<EOF
version = 2
root = "$VAR_DIR/containerd"
state = "$RUN_DIR/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$CONTAINERD_SOCK"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    netns_mounts_under_state_dir = true
    # This VM does not give root CAP_SYS_RESOURCE, so runc cannot lower a
    # container's oom_score_adj below containerd's own (the pod sandbox asks
    # for -998): clamp instead of failing every sandbox.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
      # gVisor, the RuntimeClass gvisor's handler (addons/gvisor.sh): runsc's options
      # in runsc.toml. 1.6's CRI finds the shim on containerd's PATH (start_containerd);
      # runtime_path names the same binary for newer ones, and a new gVisor pin changes
      # this file, so containerd restarts with the new PATH.
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        runtime_path = "$(addon_bin containerd-shim-runsc-v1)"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "$CONF/runsc.toml"
    # Registries (the node's own, addons/registry.sh): one hosts.toml per registry
    # host under config_path, read at each pull, so registries come and go without
    # restarting containerd.
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$REGISTRY_HOSTS_DIR"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "$VAR_DIR/containerd/opt"
EOF
}

# start_containerd: containerd with the gVisor shim's cache dir first on its PATH:
# containerd 1.6's CRI resolves a runtime_type's shim by name on its PATH and does
# not pass the runtime_path of its config on (addons/gvisor.sh).
start_containerd() {
  start containerd env PATH="$(dirname "$(addon_bin containerd-shim-runsc-v1)"):$PATH" \
    containerd --config "$CONF/containerd.toml"
}

start_kubelet() {
  start kubelet "$BIN_DIR/kubelet" \
    --config "$CONF/kubelet.yaml" \
    --kubeconfig "$CONF/kubelet.kubeconfig" \
    --root-dir "$VAR_DIR/kubelet" \
    --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" \
    --v=1
}

. "$CLUSTER_HACK_DIR/addons/addons.sh"

# ------------------------------------------------------ kind (optional) ----

if [ "${CLUSTER:-local}" = kind ]; then
  exec "$CLUSTER_HACK_DIR/kind-up.sh"
fi

# ------------------------------------------------------------ fast path ----

mkdir -p "$TA_RUN/pids"
# One cluster-up/cluster-down at a time on this machine (any checkout).
exec 8>"$TA_RUN/lock"
flock -w 600 8 || die "another cluster-up/cluster-down holds $TA_RUN/lock"
if healthy; then
  log "cluster already up (node $NODE_NAME, kubeconfig $KUBECONFIG_ADMIN)"
  ensure_addons
  log "add-ons up after $((SECONDS - T0))s"
  exit 0
fi

# Anything left over (this checkout's half-dead cluster, another checkout's
# cluster, state from a killed session) is stopped and cleaned first.
"$CLUSTER_HACK_DIR/down.sh" --for-restart 8>&-
mkdir -p "$TA_RUN/pids"
echo "$CLUSTER_DIR" >"$TA_RUN/owner"

# Refuse to start over ports someone else holds.
busy=""
for port in $CLUSTER_PORTS; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    busy+=" $port($(ss -Hltnp "sport = :$port" | sed -n 's/.*users:((\("[^"]*"\),pid=\([0-9]*\).*/\1 pid \2/p' | head -1))"
  fi
done
[ -z "$busy" ] || die "ports in use by processes this script did not start:$busy; stop them first"

# ------------------------------------------------------------- packages ----

need_pkgs=""
command -v containerd >/dev/null || need_pkgs+=" containerd"
command -v runc >/dev/null || need_pkgs+=" runc"
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/portmap ] \
  || need_pkgs+=" containernetworking-plugins"
command -v ipset >/dev/null || need_pkgs+=" ipset"
command -v conntrack >/dev/null || need_pkgs+=" conntrack"
command -v iptables >/dev/null || need_pkgs+=" iptables"
command -v openssl >/dev/null || need_pkgs+=" openssl"
command -v curl >/dev/null || need_pkgs+=" curl"
dpkg -s busybox-static >/dev/null 2>&1 || need_pkgs+=" busybox-static"
if [ -n "$need_pkgs" ]; then
  log "installing Debian packages:$need_pkgs"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || apt-get update
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $need_pkgs >/dev/null
fi

# ------------------------------------------------------------- binaries ----

"$CLUSTER_HACK_DIR/build.sh" >/dev/null

# ------------------------------------------------------------ host prep ----

mount --make-rshared /
sysctl -qw net.ipv4.ip_forward=1
if [ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
  modprobe br_netfilter 2>/dev/null || true
fi
sysctl -qw net.bridge.bridge-nf-call-iptables=1 || die "bridge netfilter (br_netfilter) is not available"
sysctl -qw net.bridge.bridge-nf-call-ip6tables=1 2>/dev/null || true

# ------------------------------------------------------------------ PKI ----

mkdir -p "$PKI" "$CONF" "$LOGS" "$PIDS" "$CLUSTER_DIR/bin"
if [ "$(cat "$PKI/node-ip" 2>/dev/null)" != "$NODE_IP/$NODE_NAME" ]; then
  rm -rf "$PKI"; mkdir -p "$PKI"
fi

if [ ! -f "$PKI/ca.crt" ]; then
  log "generating certificates"
  openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=tooladapter-local-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/ca.crt" 2>/dev/null
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi
cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$NODE_NAME,IP:127.0.0.1,IP:$SERVICE_IP,IP:$NODE_IP"
cert kubelet-serving "/CN=$NODE_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP"
cert admin "/O=system:masters/CN=tooladapter-admin" "$CLIENT_EXT"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$CLIENT_EXT"
cert node "/O=system:nodes/CN=system:node:$NODE_NAME" "$CLIENT_EXT"
cert controller-manager "/CN=system:kube-controller-manager" "$CLIENT_EXT"
cert scheduler "/CN=system:kube-scheduler" "$CLIENT_EXT"
cert kube-router "/CN=tooladapter:kube-router" "$CLIENT_EXT"
echo "$NODE_IP/$NODE_NAME" >"$PKI/node-ip"
chmod 600 "$PKI"/*.key

kubeconfig "$KUBECONFIG_ADMIN" admin "$LOCAL_API"
kubeconfig "$CONF/controller-manager.kubeconfig" controller-manager "$LOCAL_API"
kubeconfig "$CONF/scheduler.kubeconfig" scheduler "$LOCAL_API"
kubeconfig "$CONF/kubelet.kubeconfig" node "$LOCAL_API"
kubeconfig "$CONF/kube-router.kubeconfig" kube-router "$LOCAL_API"

# ------------------------------------------------------------ containerd ---

mkdir -p "$VAR_DIR" "$RUN_DIR" "$REGISTRY_HOSTS_DIR"
containerd_config | write_file "$CONF/containerd.toml" || true
runsc_config | write_file "$CONF/runsc.toml" || true
start_containerd
wait_component containerd "containerd socket" "$WAIT_SHORT" ctr --address "$CONTAINERD_SOCK" version

# --------------------------------------------------------------- images ----

"$CLUSTER_HACK_DIR/images.sh"

# ----------------------------------------------------- control plane -------

start etcd "$BIN_DIR/etcd" \
  --name "$NODE_NAME" \
  --data-dir "$CLUSTER_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "$NODE_NAME=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync \
  --quota-backend-bytes 2147483648 \
  --log-level warn
wait_component etcd "etcd /health" "$WAIT_SHORT" curl -fsS --max-time 3 "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

start kube-apiserver "$BIN_DIR/kube-apiserver" \
  --advertise-address "$NODE_IP" \
  --bind-address 0.0.0.0 \
  --secure-port "$APISERVER_PORT" \
  --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --client-ca-file "$PKI/ca.crt" \
  --tls-cert-file "$PKI/apiserver.crt" \
  --tls-private-key-file "$PKI/apiserver.key" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$PKI/ca.crt" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" \
  --service-account-signing-key-file "$PKI/sa.key" \
  --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction,OwnerReferencesPermissionEnforcement \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --allow-privileged=true \
  --profiling="${CLUSTER_APISERVER_PROFILING:-false}" \
  --v=1
wait_component kube-apiserver "kube-apiserver /readyz" "$WAIT_LONG" apiserver_ready

start kube-controller-manager "$BIN_DIR/kube-controller-manager" \
  --kubeconfig "$CONF/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$CONF/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$CONF/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 \
  --leader-elect=false \
  --use-service-account-credentials \
  --service-account-private-key-file "$PKI/sa.key" \
  --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" \
  --cluster-signing-key-file "$PKI/ca.key" \
  --allocate-node-cidrs \
  --cluster-cidr "$CLUSTER_CIDR" \
  --node-cidr-mask-size 24 \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --profiling=false \
  --v=1

start kube-scheduler "$BIN_DIR/kube-scheduler" \
  --kubeconfig "$CONF/scheduler.kubeconfig" \
  --authentication-kubeconfig "$CONF/scheduler.kubeconfig" \
  --authorization-kubeconfig "$CONF/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 \
  --leader-elect=false \
  --profiling=false \
  --v=1

# RBAC for kube-router's NetworkPolicy controller (client cert user).
kc apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: tooladapter:kube-router
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes]
  verbs: [patch, update]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: tooladapter:kube-router
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: tooladapter:kube-router
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: tooladapter:kube-router
EOF

# ---------------------------------------------------------------- kubelet --

kubelet_config | write_file "$CONF/kubelet.yaml" || true
start_kubelet

node_pod_cidr() { kc get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}' 2>/dev/null | grep -q /; }
wait_component kubelet "node $NODE_NAME registered with a podCIDR" "$WAIT_LONG" node_pod_cidr
POD_CIDR="$(kc get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}')"

# CNI: bridge + host-local on the node's podCIDR, portmap; loopback is added
# by containerd itself. Written in place with one write(): containerd 1.6
# reloads its CNI config on WRITE/RENAME/REMOVE events but ignores CREATE, so
# a file renamed into the directory would go unnoticed.
cni_conf="$(cat <<EOF
{
  "cniVersion": "0.4.0",
  "name": "tooladapter",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$VAR_DIR/cni/networks",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
)"
mkdir -p /etc/cni/net.d
printf '%s\n' "$cni_conf" >"$CNI_CONF"
wait_component kubelet "node $NODE_NAME Ready" "$WAIT_LONG" node_ready

# ------------------------------------------------------------ kube-router --

start kube-router "$BIN_DIR/kube-router" \
  --kubeconfig "$CONF/kube-router.kubeconfig" \
  --run-firewall=true \
  --run-router=false \
  --run-service-proxy=false \
  --enable-cni=false \
  --enable-ipv4=true \
  --enable-ipv6=false \
  --hostname-override "$NODE_NAME" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --health-port "$KUBE_ROUTER_HEALTH_PORT" \
  --metrics-port 0 \
  --v=1
kube_router_ready() {
  curl -fsS --max-time 3 "http://127.0.0.1:$KUBE_ROUTER_HEALTH_PORT/healthz" >/dev/null \
    && iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1
}
wait_component kube-router "kube-router firewall chains" "$WAIT_SHORT" kube_router_ready

# ------------------------------------------------------------ finishing ----

default_sa() { kc -n default get serviceaccount default; }
wait_for "default service account" "$WAIT_SHORT" default_sa || die "no default service account"

# ---------------------------------------------------------------- add-ons --

ensure_addons

ln -sfn "$BIN_DIR/kubectl" "$CLUSTER_DIR/bin/kubectl"
cat >"$CLUSTER_DIR/env" <<EOF
export KUBECONFIG="$KUBECONFIG_ADMIN"
export PATH="$CLUSTER_DIR/bin:\$PATH"
export TOOLADAPTER_NODE_IP="$NODE_IP"
export TOOLADAPTER_NODE_NAME="$NODE_NAME"
EOF
echo "$CLUSTER_DIR" >"$TA_RUN/owner"
log "cluster up in $((SECONDS - T0))s: node $NODE_NAME ($NODE_IP), Kubernetes $K8S_VERSION"
log "  export KUBECONFIG=$KUBECONFIG_ADMIN   (or: . $CLUSTER_DIR/env)"
