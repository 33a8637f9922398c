#!/usr/bin/env bash
# Build the cluster binaries from the pinned wrapper modules into the binary
# cache ($BIN_DIR, outside the repo). A no-op when the cache is complete.
#
#   hack/cluster/build.sh          build if needed, print the bin dir
#   hack/cluster/build.sh --force  rebuild
set -euo pipefail
. "$(dirname "$0")/lib.sh"

force=0
[ "${1:-}" = "--force" ] && force=1

complete() {
  local b
  for b in $CLUSTER_BINARIES; do [ -x "$BIN_DIR/$b" ] || return 1; done
}

if [ "$force" = 0 ] && complete; then
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || die "go is required to build the cluster binaries"
mkdir -p "$TA_CACHE"
exec 9>"$TA_CACHE/build.lock"
log "waiting for the build lock $TA_CACHE/build.lock"
flock 9
if [ "$force" = 0 ] && complete; then
  echo "$BIN_DIR"
  exit 0
fi

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly"
JOBS="${BUILD_JOBS:-2}"
tmp="$(dirname "$BIN_DIR")/bin.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

# Version stamping, so that /version and `kubectl version` report the real
# release instead of v0.0.0-master.
ver="${K8S_VERSION#v}"
major="${ver%%.*}"; rest="${ver#*.}"; minor="${rest%%.*}"
build_date="$(go list -m -json "k8s.io/kubernetes@$K8S_VERSION" 2>/dev/null \
  | awk -F'"' '/"Time"/ {print $4; exit}')"
[ -n "$build_date" ] || build_date="1970-01-01T00:00:00Z"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitCommit=module-$K8S_VERSION -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

have() { [ -x "$BIN_DIR/$1" ]; }
keep() { for b in "$@"; do [ "$force" = 0 ] && have "$b" && cp -p "$BIN_DIR/$b" "$tmp/$b"; done; return 0; }

keep kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd kube-router pause
if ! { [ -x "$tmp/kube-apiserver" ] && [ -x "$tmp/kube-controller-manager" ] && [ -x "$tmp/kube-scheduler" ] \
       && [ -x "$tmp/kubelet" ] && [ -x "$tmp/kubectl" ]; }; then
  log "building Kubernetes $K8S_VERSION (cold builds take tens of minutes)"
  (cd "$CLUSTER_HACK_DIR" && go build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
fi
if [ ! -x "$tmp/pause" ]; then
  log "building pause"
  (cd "$CLUSTER_HACK_DIR" && go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$tmp/pause" ./pause)
fi
if [ ! -x "$tmp/etcd" ]; then
  log "building etcd $ETCD_VERSION"
  (cd "$CLUSTER_HACK_DIR/etcd" && go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
fi
if [ ! -x "$tmp/kube-router" ]; then
  log "building kube-router $KUBE_ROUTER_VERSION"
  kr=github.com/cloudnativelabs/kube-router/v2/pkg/version
  (cd "$CLUSTER_HACK_DIR/kube-router" && go build -p "$JOBS" -trimpath \
    -ldflags "-s -w -X $kr.Version=$KUBE_ROUTER_VERSION -X $kr.BuildDate=$build_date" \
    -o "$tmp/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
fi

rm -rf "$BIN_DIR"
mv "$tmp" "$BIN_DIR"
trap - EXIT
log "built $(echo "$CLUSTER_BINARIES" | wc -w) binaries in $((SECONDS - start))s into $BIN_DIR"
echo "$BIN_DIR"
