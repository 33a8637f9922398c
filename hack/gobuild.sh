# Sourced by the build scripts of test servers built from Go modules (hack/s3, hack/otel):
# one program from its own pinned wrapper module into the binary cache, outside the repo,
# once per module graph, program and Go toolchain.
#
#   cached_go_build LABEL NAME VERSION MODULE_DIR PACKAGE FORCE KEY_FILE...
#
# prints the binary's path; FORCE is "--force" to rebuild, anything else to reuse.

TA_CACHE="${TOOLADAPTER_CACHE:-$HOME/.cache/tooladapter}"
# Test servers are compiled without optimisation or inlining: SeaweedFS with an empty build
# cache took 189 s so against 278 s optimised here, and no test waits on their speed. (Not
# in the cache key: the same source either way; a cached optimised build is kept.)
TEST_SERVER_GCFLAGS="all=-N -l"

cached_go_build() {
  local label=$1 name=$2 version=$3 mod=$4 pkg=$5 force=$6
  shift 6
  local key bin tmp start
  key="$( { go env GOVERSION 2>/dev/null || echo none; cat "$@"; } | sha256sum | cut -c1-12)"
  bin="$TA_CACHE/bin/$name-$version-$key"
  if [ "$force" != "--force" ] && [ -x "$bin" ]; then
    echo "$bin"
    return 0
  fi
  command -v go >/dev/null || { echo "[$name-build] error: go is required to build $label" >&2; return 1; }
  mkdir -p "$TA_CACHE/bin"
  # The cluster's build lock: two cold Go builds at once on two cores help nobody.
  exec 9>"$TA_CACHE/build.lock"
  echo "[$name-build] waiting for the build lock $TA_CACHE/build.lock" >&2
  flock 9
  if [ "$force" != "--force" ] && [ -x "$bin" ]; then
    echo "$bin"
    return 0
  fi
  echo "[$name-build] building $label $version (a cold build takes minutes)" >&2
  start=$SECONDS
  tmp="$bin.tmp.$$"
  if ! (cd "$mod" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly" \
      go build -p "${BUILD_JOBS:-2}" -trimpath -gcflags="$TEST_SERVER_GCFLAGS" -ldflags "-s -w" \
        -o "$tmp" "$pkg"); then
    rm -f "$tmp"
    return 1
  fi
  mv "$tmp" "$bin"
  echo "[$name-build] built $bin in $((SECONDS - start))s" >&2
  echo "$bin"
}
