#!/usr/bin/env bash
# Build the cluster binaries from the pinned wrapper modules into the binary
# cache ($BIN_DIR, outside the repo), and the add-on binaries (CoreDNS,
# local-path-provisioner, helm) each into its own cache dir (addon_bin in
# lib.sh). A no-op when the cache is complete.
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
  for b in $ADDON_BINARIES; do [ -x "$(addon_bin "$b")" ] || return 1; done
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
need() { [ "$force" = 1 ] || ! have "$1"; }
# timed DESCRIPTION CMD...: run CMD, log how long it took (cold-build budget).
timed() {
  local what="$1" t=$SECONDS
  shift
  log "building $what"
  "$@"
  log "built $what in $((SECONDS - t))s"
}
# gobuild MODULE_DIR GO_BUILD_ARGS...
gobuild() { local dir="$1"; shift; (cd "$dir" && go build -p "$JOBS" -trimpath "$@"); }

# gvisor_shim_build OUT GO_BUILD_ARGS...: containerd-shim-runsc-v1 from a throwaway
# `go mod vendor` copy of the gvisor wrapper module with gvisor/patch.py applied (two
# one-line changes for containerd 1.6 on these VMs; see there). The module cache is
# never touched; the copy (about 100 MB) lives for the build only.
gvisor_shim_build() {
  local out="$1" src="$tmp/gvisor-shim" rc=0
  shift
  rm -rf "$src"; mkdir -p "$src"
  cp "$CLUSTER_HACK_DIR/gvisor/go.mod" "$CLUSTER_HACK_DIR/gvisor/go.sum" "$src/"
  (cd "$src" && go mod vendor && python3 "$CLUSTER_HACK_DIR/gvisor/patch.py" vendor \
    && go build -mod=vendor -p "$JOBS" -trimpath -o "$out" "$@") || rc=$?
  rm -rf "$src"
  return "$rc"
}

core_complete() { local b; for b in $CLUSTER_BINARIES; do have "$b" || return 1; done; }

if [ "$force" = 1 ] || ! core_complete; then
  k8s_pkgs=""
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy; do
    need "$b" && k8s_pkgs+=" k8s.io/kubernetes/cmd/$b"
  done
  if [ -n "$k8s_pkgs" ]; then
    # shellcheck disable=SC2086
    timed "Kubernetes $K8S_VERSION:${k8s_pkgs//k8s.io\/kubernetes\/cmd\// } (cold: tens of minutes)" \
      gobuild "$CLUSTER_HACK_DIR" -ldflags "$ldflags" -o "$tmp/" $k8s_pkgs
  fi
  ! need pause || timed pause gobuild "$CLUSTER_HACK_DIR" -ldflags "-s -w" -o "$tmp/pause" ./pause
  ! need etcd || timed "etcd $ETCD_VERSION" \
    gobuild "$CLUSTER_HACK_DIR/etcd" -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
  kr=github.com/cloudnativelabs/kube-router/v2/pkg/version
  ! need kube-router || timed "kube-router $KUBE_ROUTER_VERSION" gobuild "$CLUSTER_HACK_DIR/kube-router" \
    -ldflags "-s -w -X $kr.Version=$KUBE_ROUTER_VERSION -X $kr.BuildDate=$build_date" \
    -o "$tmp/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router

  if [ "$force" = 0 ] && [ -d "$BIN_DIR" ]; then
    # Only add what was missing, file by file: the running cluster's binaries
    # and the kubectl link stay where they are.
    for b in $CLUSTER_BINARIES; do have "$b" || mv "$tmp/$b" "$BIN_DIR/$b"; done
  else
    rm -rf "$BIN_DIR"
    mv "$tmp" "$BIN_DIR"
  fi
fi
mkdir -p "$tmp"

# Add-ons: each from its own wrapper module into its own cache dir.
for name in $ADDON_BINARIES; do
  out="$(addon_bin "$name")"
  [ "$force" = 0 ] && [ -x "$out" ] && continue
  case "$name" in
    coredns) pkg=. flags="-s -w" ;;  # main.go of the wrapper: only our plugins
    local-path-provisioner) pkg=github.com/rancher/local-path-provisioner flags="-s -w" ;;
    helm)
      pkg=helm.sh/helm/v3/cmd/helm
      flags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
      flags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      # The Kubernetes version `helm template` and `helm lint` assume without
      # --kube-version (as helm's own Makefile sets it; unset it is 1.20, below the
      # chart's kubeVersion): the local cluster's.
      kmajor="${K8S_VERSION#v}"; kminor="${kmajor#*.}"; kmajor="${kmajor%%.*}"; kminor="${kminor%%.*}"
      for p in pkg/chartutil pkg/lint/rules; do
        flags+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=$kmajor -X helm.sh/helm/v3/$p.k8sVersionMinor=$kminor"
      done ;;
    # gVisor (the RuntimeClass gvisor): the OCI runtime and the containerd shim that
    # drives it, nothing else of the module (a cold build of both: about 2 minutes).
    runsc)
      pkg=gvisor.dev/gvisor/runsc
      flags="-s -w -X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION" ;;
    containerd-shim-runsc-v1) pkg=gvisor.dev/gvisor/shim flags="-s -w" ;;
  esac
  mkdir -p "$(dirname "$out")"
  if [ "$name" = containerd-shim-runsc-v1 ]; then
    timed "$name $(addon_version "$name") (patched for containerd 1.6)" \
      gvisor_shim_build "$tmp/$name" -ldflags "$flags" "$pkg"
  else
    timed "$name $(addon_version "$name")" \
      gobuild "$CLUSTER_HACK_DIR/$(addon_module "$name")" -ldflags "$flags" -o "$tmp/$name" "$pkg"
  fi
  mv "$tmp/$name" "$out"
done

rm -rf "$tmp"
trap - EXIT
log "binaries complete after $((SECONDS - start))s: $BIN_DIR and $TA_CACHE/addons/"
echo "$BIN_DIR"
