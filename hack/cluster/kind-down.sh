#!/usr/bin/env bash
# `make cluster-down CLUSTER=kind`
set -euo pipefail
. "$(dirname "$0")/lib.sh"
NAME="${KIND_CLUSTER_NAME:-tooladapter}"
command -v kind >/dev/null || die "kind is not installed"
kind delete cluster --name "$NAME"
rm -rf "$CLUSTER_DIR"
