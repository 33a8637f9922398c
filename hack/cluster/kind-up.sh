#!/usr/bin/env bash
# `make cluster-up CLUSTER=kind`: the same contract (.cluster/kubeconfig,
# .cluster/env, .cluster/bin/kubectl, localhost/tooladapter-sandbox:dev
# loaded) on a machine with Docker and kind. kind's default CNI (kindnet,
# kind >= v0.24) enforces NetworkPolicy.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
NAME="${KIND_CLUSTER_NAME:-tooladapter}"
command -v docker >/dev/null && docker info >/dev/null 2>&1 || die "CLUSTER=kind needs a running Docker engine"
command -v kind >/dev/null || die "CLUSTER=kind needs the kind binary on PATH"
command -v kubectl >/dev/null || die "CLUSTER=kind needs kubectl on PATH"
mkdir -p "$CLUSTER_DIR/bin" "$CLUSTER_DIR/logs"
if ! kind get clusters 2>/dev/null | grep -qx "$NAME"; then
  kind create cluster --name "$NAME" --kubeconfig "$CLUSTER_DIR/kubeconfig" \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 180s
else
  kind get kubeconfig --name "$NAME" >"$CLUSTER_DIR/kubeconfig"
fi
archive="$("$CLUSTER_HACK_DIR/images.sh" --sandbox-archive)"
kind load image-archive "$archive" --name "$NAME"
ln -sfn "$(command -v kubectl)" "$CLUSTER_DIR/bin/kubectl"
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
kubectl wait --for=condition=Ready node --all --timeout=180s
until kubectl -n default get serviceaccount default >/dev/null 2>&1; do sleep 1; done
node="$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')"
cat >"$CLUSTER_DIR/env" <<EOT
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
export PATH="$CLUSTER_DIR/bin:\$PATH"
export TOOLADAPTER_NODE_NAME="$node"
export TOOLADAPTER_NODE_IP="$(kubectl get node "$node" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')"
EOT
log "kind cluster $NAME up; . $CLUSTER_DIR/env"
