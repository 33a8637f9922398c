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
for c in $COMPONENTS; do
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
  else
    echo "apiserver: NOT ready"; ok=1
  fi
else
  echo "kubeconfig: none (run make cluster-up)"; ok=1
fi
exit $ok
