# shellcheck shell=bash
# The node's image registry (issue 32), sourced by addons.sh: Debian's
# docker-registry package (the distribution registry 2.8; apt, nothing built)
# as a host process listening on the node's address, plain HTTP, no auth, its
# blobs under $REGISTRY_DIR (wiped with the cluster). containerd pulls from it
# through $REGISTRY_HOSTS_DIR/<node>:<port>/hosts.toml (plain HTTP), which its
# CRI reads at every pull (config_path): no containerd restart per registry.
#
#   make image-push REGISTRY=$TOOLADAPTER_NODE_IP:5000    # what the deploy suite does
#   curl http://$TOOLADAPTER_NODE_IP:5000/v2/_catalog
#
# Its access log (.cluster/logs/docker-registry.log) shows every manifest GET,
# which is how the deploy suite proves a pull happened.

registry_addr() { echo "$NODE_IP:$REGISTRY_PORT"; }

registry_config() {
  cat <<EOF
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $REGISTRY_DIR
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: $(registry_addr)
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
EOF
}

registry_ready() { curl -fsS --max-time 3 "http://$(registry_addr)/v2/" >/dev/null; }

# ensure_containerd_config: a running containerd started with an older
# configuration (before config_path, or before the runsc runtime of
# addons/gvisor.sh) is restarted once with the current one;
# its pods keep running (their shims outlive it) and the kubelet reconnects.
ensure_containerd_config() {
  mkdir -p "$REGISTRY_HOSTS_DIR"
  if containerd_config | write_file "$CONF/containerd.toml" && component_running containerd; then
    log "containerd configuration changed: restarting containerd once"
    stop_component_pid containerd
    start_containerd
    wait_component containerd "containerd socket" "$WAIT_SHORT" ctr --address "$CONTAINERD_SOCK" version
    wait_component kubelet "node $NODE_NAME Ready" "$WAIT_LONG" node_ready
  fi
}

ensure_registry() {
  local hosts
  if ! command -v docker-registry >/dev/null; then
    log "installing Debian's docker-registry"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
           apt-get install -y -qq --no-install-recommends docker-registry >/dev/null; }
  fi
  mkdir -p "$REGISTRY_DIR" "$REGISTRY_HOSTS_DIR/$(registry_addr)"
  # containerd: plain HTTP to this registry, pull and resolve only.
  hosts="$REGISTRY_HOSTS_DIR/$(registry_addr)/hosts.toml"
  write_file "$hosts" <<EOF || true
server = "http://$(registry_addr)"

[host."http://$(registry_addr)"]
  capabilities = ["pull", "resolve"]
EOF
  if registry_config | write_file "$CONF/registry.yml" && component_running docker-registry; then
    log "registry configuration changed"
    stop_component_pid docker-registry
  fi
  if ! component_running docker-registry; then
    if ss -Hltn "sport = :$REGISTRY_PORT" | grep -q .; then
      log "WARNING: port $REGISTRY_PORT is taken by a process this script did not start: no node registry"
      return 0
    fi
    start docker-registry docker-registry serve "$CONF/registry.yml"
  fi
  wait_component docker-registry "registry at http://$(registry_addr)/v2/" "$WAIT_SHORT" registry_ready
}
