# shellcheck shell=bash
# The local cluster's add-ons (issue 15), sourced by up.sh once its helpers
# and settings are defined:
#   kube-proxy   host process, iptables mode: ClusterIP Services work from
#                pods and from the host (kube-router only does NetworkPolicy)
#   CoreDNS      in-cluster, kube-system/coredns behind the Service kube-dns
#                at $CLUSTER_DNS_IP (the kubelet's clusterDNS); no forwarding
#   local-path   in-cluster provisioner, the default StorageClass local-path
#   helm         the CLI, linked into .cluster/bin
#   registry     Debian's docker-registry, host process on the node's address
#                (addons/registry.sh); containerd pulls from it over plain HTTP
#   gvisor       the RuntimeClass gvisor: containerd's runsc runtime, runsc and
#                its shim built from hack/cluster/gvisor (addons/gvisor.sh)
#
# ensure_addons is additive and idempotent: on a running cluster it starts
# only what is missing (and restarts the kubelet once, if its DNS settings
# changed), so a cluster started before the add-ons existed gains them
# without a restart; a failing add-on never takes the rest down.

ADDONS_DIR="$CLUSTER_HACK_DIR/addons"
. "$ADDONS_DIR/registry.sh"
. "$ADDONS_DIR/gvisor.sh"

kube_proxy_ready() {
  curl -fsS --max-time 3 "http://127.0.0.1:$KUBE_PROXY_HEALTH_PORT/healthz" >/dev/null \
    && iptables -t nat -S KUBE-SERVICES >/dev/null 2>&1
}

kube_proxy_config() {
  cat <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $CONF/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $CLUSTER_CIDR
healthzBindAddress: 127.0.0.1:$KUBE_PROXY_HEALTH_PORT
metricsBindAddress: 127.0.0.1:$KUBE_PROXY_METRICS_PORT
# NodePorts on the node's primary address only, never on 127.0.0.1 (that would
# need route_localnet, which exposes localhost services to the network).
nodePortAddresses: [primary]
iptables:
  localhostNodePorts: false
# Leave the host's conntrack sysctls alone (no CAP_SYS_RESOURCE here, and
# they are the machine's, not this cluster's).
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

ensure_kube_proxy() {
  # system:kube-proxy is bound to system:node-proxier by the default RBAC.
  cert kube-proxy "/CN=system:kube-proxy" "$CLIENT_EXT"
  kubeconfig "$CONF/kube-proxy.kubeconfig" kube-proxy "$LOCAL_API" || true
  if kube_proxy_config | write_file "$CONF/kube-proxy.yaml" && component_running kube-proxy; then
    log "kube-proxy configuration changed"
    stop_component_pid kube-proxy
  fi
  if ! component_running kube-proxy; then
    start kube-proxy "$BIN_DIR/kube-proxy" --config "$CONF/kube-proxy.yaml"
  fi
  wait_component kube-proxy "kube-proxy rules synced" "$WAIT_SHORT" kube_proxy_ready
}

# ensure_image NAME: the image of add-on binary NAME is in containerd.
ensure_image() {
  local tag out
  tag="$(addon_image "$1")"
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images ls -q "name==$tag" | grep -q . && return 0
  out="$CLUSTER_DIR/images/$1.tar"
  mkdir -p "$CLUSTER_DIR/images"
  python3 "$ADDONS_DIR/image.py" --binary "$(addon_bin "$1")" --tag "$tag" --out "$out" >/dev/null
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$out" >/dev/null
  rm -f "$out"
  log "imported $tag"
}

# apply_manifest FILE KEY=VALUE...: apply addons/FILE with @KEY@ replaced.
apply_manifest() {
  local file="$1" kv text
  shift
  text="$(cat "$ADDONS_DIR/$file")"
  shopt -u patsub_replacement 2>/dev/null || true  # a literal & in a value
  for kv in "$@"; do text="${text//@${kv%%=*}@/${kv#*=}}"; done
  case "$text" in *@[A-Z_]*@*) die "unfilled placeholder in $file" ;; esac
  printf '%s\n' "$text" | kc apply --server-side --force-conflicts --field-manager tooladapter-cluster -f - >/dev/null
}

# wait_rollout NAMESPACE/NAME: the Deployment's pods of its current spec are
# all ready; on timeout, show why.
wait_rollout() {
  local ns="${1%/*}" name="${1#*/}"
  kc -n "$ns" rollout status "deployment/$name" --timeout "${WAIT_LONG}s" >/dev/null && return 0
  kc -n "$ns" get pods -o wide >&2 || true
  kc -n "$ns" describe pods >&2 2>/dev/null | tail -n 30 >&2 || true
  die "deployment $1 did not become ready"
}

ensure_addons() {
  "$CLUSTER_HACK_DIR/build.sh" >/dev/null
  if kubelet_config | write_file "$CONF/kubelet.yaml" && component_running kubelet; then
    log "kubelet configuration changed (cluster DNS): restarting the kubelet"
    stop_component_pid kubelet
    start_kubelet
    wait_component kubelet "node $NODE_NAME Ready" "$WAIT_LONG" node_ready
  fi
  ensure_containerd_config
  ensure_gvisor
  ensure_kube_proxy
  ensure_registry
  ensure_image coredns
  ensure_image local-path-provisioner
  apply_manifest coredns.yaml IMAGE="$(addon_image coredns)" DNS_IP="$CLUSTER_DNS_IP" DOMAIN="$CLUSTER_DOMAIN"
  apply_manifest local-path.yaml IMAGE="$(addon_image local-path-provisioner)" \
    HELPER_IMAGE="$SANDBOX_IMAGE" VOLUME_DIR="$LOCAL_PATH_DIR"
  wait_rollout "$COREDNS_DEPLOYMENT"
  wait_rollout "$LOCAL_PATH_DEPLOYMENT"
  wait_for "cluster DNS through the kube-dns Service" "$WAIT_SHORT" cluster_dns_answers \
    || die "CoreDNS does not answer at $CLUSTER_DNS_IP"
  link "$(addon_bin helm)" "$CLUSTER_DIR/bin/helm"
}

# link TARGET LINK: point LINK at TARGET, atomically (never absent meanwhile).
link() {
  [ "$(readlink "$2" 2>/dev/null)" = "$1" ] && return 0
  mkdir -p "$(dirname "$2")"
  ln -sfn "$1" "$2.tmp.$$"
  mv -Tf "$2.tmp.$$" "$2"
}
