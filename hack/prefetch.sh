#!/usr/bin/env bash
# Download the Go modules every cold build needs, all modules at once, while the first
# build compiles: fetching is network-bound and compiling CPU-bound, so on a cold machine
# the downloads of later builds (SeaweedFS alone is 2 GB of modules, about 70 s here) no
# longer wait their turn behind the Kubernetes compile. `go list -deps` fetches exactly
# the modules the packages need and compiles nothing. A module whose go.sum was prefetched
# before is skipped (a stamp under the cache), so a warm run costs nothing.
#
#   hack/prefetch.sh        (make test runs it in the background)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
stamps="${TOOLADAPTER_CACHE:-$HOME/.cache/tooladapter}/prefetched"
mkdir -p "$stamps"
command -v go >/dev/null || exit 0
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly"

# module directory and the packages its build script builds
modules=(
  "hack/cluster k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy ./pause"
  "hack/cluster/etcd go.etcd.io/etcd/server/v3"
  "hack/cluster/kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
  "hack/cluster/coredns ."
  "hack/cluster/local-path github.com/rancher/local-path-provisioner"
  "hack/cluster/helm helm.sh/helm/v3/cmd/helm"
  "hack/cluster/gvisor gvisor.dev/gvisor/runsc gvisor.dev/gvisor/shim"
  "hack/s3/seaweedfs github.com/seaweedfs/seaweedfs/weed"
  "hack/otel ."
  "hack/oauth ."
)
for entry in "${modules[@]}"; do
  read -r dir pkgs <<<"$entry"
  stamp="$stamps/$(cat "$root/$dir/go.mod" "$root/$dir/go.sum" | sha256sum | cut -c1-16)"
  [ -e "$stamp" ] && continue
  (
    start=$SECONDS
    # shellcheck disable=SC2086
    if (cd "$root/$dir" && go list -deps -e $pkgs >/dev/null 2>&1); then
      touch "$stamp"
      echo "[prefetch] $dir: modules fetched in $((SECONDS - start))s"
    else
      echo "[prefetch] $dir: could not fetch every module (the build will say why)"
    fi
  ) &
done
wait
