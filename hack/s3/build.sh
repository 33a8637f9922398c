#!/usr/bin/env bash
# Build the S3-compatible test server, SeaweedFS's `weed`, from the pinned wrapper module
# (hack/s3/seaweedfs/go.mod) into the binary cache, outside the repo. A no-op when cached.
#
#   hack/s3/build.sh          build if needed, print the binary's path
#   hack/s3/build.sh --force  rebuild
set -euo pipefail

S3_HACK_DIR="$(cd "$(dirname "$0")" && pwd)"
TA_CACHE="${TOOLADAPTER_CACHE:-$HOME/.cache/tooladapter}"
log() { echo "[s3-build] $*" >&2; }
die() { log "error: $*"; exit 1; }

mod="$S3_HACK_DIR/seaweedfs"
version="$(awk '($1=="require" && $2=="github.com/seaweedfs/seaweedfs") {print $3; exit} $1=="github.com/seaweedfs/seaweedfs" {print $2; exit}' "$mod/go.mod")"
[ -n "$version" ] || die "no seaweedfs version in $mod/go.mod"
# The key changes with the pinned module graph and the Go toolchain.
key="$( { go env GOVERSION 2>/dev/null || echo none; cat "$mod/go.mod" "$mod/go.sum"; } \
  | sha256sum | cut -c1-12)"
BIN="$TA_CACHE/bin/weed-$version-$key"

if [ "${1:-}" != "--force" ] && [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || die "go is required to build the S3 test server"
mkdir -p "$TA_CACHE/bin"
# The cluster's build lock: two cold Go builds at once on two cores help nobody.
exec 9>"$TA_CACHE/build.lock"
log "waiting for the build lock $TA_CACHE/build.lock"
flock 9
if [ "${1:-}" != "--force" ] && [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly"
log "building SeaweedFS $version (a cold build takes several minutes)"
start=$SECONDS
tmp="$BIN.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(cd "$mod" && go build -p "${BUILD_JOBS:-2}" -trimpath -ldflags "-s -w" -o "$tmp" \
  github.com/seaweedfs/seaweedfs/weed)
mv "$tmp" "$BIN"
trap - EXIT
log "built $BIN in $((SECONDS - start))s"
echo "$BIN"
