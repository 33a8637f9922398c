#!/usr/bin/env bash
# Show the state of the local cluster; exit 0 only when it is healthy.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

if [ "${CLUSTER:-local}" = kind ]; then
  command -v kind >/dev/null || die "kind is not installed"
  kind get clusters 2>/dev/null | grep -qx tooladapter || { echo "kind cluster tooladapter: absent"; exit 1; }
  kubectl --kubeconfig "$CLUSTER_DIR/kubeconfig" get nodes -o wide
  exit $?
fi

ok=0
owner="$(cat "$TA_RUN/owner" 2>/dev/null || echo none)"
echo "checkout owning the running cluster: $owner"
[ "$owner" = "$CLUSTER_DIR" ] || { echo "  (not this checkout: $CLUSTER_DIR)"; ok=1; }
for c in $COMPONENTS $ADDON_COMPONENTS; do
  if pid="$(component_pid "$c")"; then
    rss="$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null)"
    printf '  %-24s running  pid %-7s rss %6d MiB\n' "$c" "$pid" "$(( ${rss:-0} / 1024 ))"
  else
    printf '  %-24s STOPPED\n' "$c"; ok=1
  fi
done
KC="$CLUSTER_DIR/kubeconfig"
if [ -f "$KC" ] && [ -x "$BIN_DIR/kubectl" ]; then
  echo "kubeconfig: $KC"
  if "$BIN_DIR/kubectl" --kubeconfig "$KC" get --raw /readyz >/dev/null 2>&1; then
    echo "apiserver: ready ($("$BIN_DIR/kubectl" --kubeconfig "$KC" version -o json 2>/dev/null \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])' 2>/dev/null))"
    "$BIN_DIR/kubectl" --kubeconfig "$KC" get nodes -o wide
    # In-cluster add-ons (issue 15): ready replicas of their Deployments.
    for d in $COREDNS_DEPLOYMENT $LOCAL_PATH_DEPLOYMENT; do
      ready="$("$BIN_DIR/kubectl" --kubeconfig "$KC" -n "${d%/*}" get deployment "${d#*/}" \
        -o jsonpath='{.status.readyReplicas}/{.spec.replicas}' 2>/dev/null)"
      if [ -n "$ready" ] && [ "${ready%/*}" = "${ready#*/}" ]; then
        printf '  %-24s ready    %s\n' "${d#*/}" "$ready"
      else
        printf '  %-24s NOT READY %s\n' "${d#*/}" "${ready:-absent}"; ok=1
      fi
    done
    if cluster_dns_answers; then
      echo "cluster DNS: answers at $CLUSTER_DNS_IP (kube-dns)"
    else
      echo "cluster DNS: NOT answering at $CLUSTER_DNS_IP"; ok=1
    fi
    if curl -fsS --max-time 3 "http://$(node_ip):$REGISTRY_PORT/v2/" >/dev/null 2>&1; then
      echo "registry: answers at http://$(node_ip):$REGISTRY_PORT (images: make image-push REGISTRY=$(node_ip):$REGISTRY_PORT)"
    else
      echo "registry: NOT answering at http://$(node_ip):$REGISTRY_PORT"; ok=1
    fi
    sc="$("$BIN_DIR/kubectl" --kubeconfig "$KC" get storageclass -o \
      jsonpath='{range .items[?(@.metadata.annotations.storageclass\.kubernetes\.io/is-default-class=="true")]}{.metadata.name}{end}' \
      2>/dev/null)"
    if [ -n "$sc" ]; then echo "default StorageClass: $sc"; else echo "default StorageClass: NONE"; ok=1; fi
    # gVisor (addons/gvisor.sh): the RuntimeClass GVisor sandboxes run with.
    handler="$("$BIN_DIR/kubectl" --kubeconfig "$KC" get runtimeclass gvisor -o jsonpath='{.handler}' 2>/dev/null)"
    if [ -n "$handler" ]; then echo "RuntimeClass gvisor: handler $handler"; else echo "RuntimeClass gvisor: NONE"; ok=1; fi
  else
    echo "apiserver: NOT ready"; ok=1
  fi
else
  echo "kubeconfig: none (run make cluster-up)"; ok=1
fi
if [ -x "$CLUSTER_DIR/bin/helm" ]; then
  echo "helm: $("$CLUSTER_DIR/bin/helm" version --short 2>/dev/null)"
else
  echo "helm: not linked (make cluster-up)"; ok=1
fi
exit $ok
