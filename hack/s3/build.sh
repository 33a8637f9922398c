#!/usr/bin/env bash
# Build the S3-compatible test server, SeaweedFS's `weed`, from the pinned wrapper module
# (hack/s3/seaweedfs/go.mod) into the binary cache, outside the repo. A no-op when cached.
#
#   hack/s3/build.sh          build if needed, print the binary's path
#   hack/s3/build.sh --force  rebuild
set -euo pipefail
. "$(dirname "$0")/../gobuild.sh"

mod="$(cd "$(dirname "$0")" && pwd)/seaweedfs"
version="$(awk '($1=="require" && $2=="github.com/seaweedfs/seaweedfs") {print $3; exit} $1=="github.com/seaweedfs/seaweedfs" {print $2; exit}' "$mod/go.mod")"
[ -n "$version" ] || { echo "[s3-build] error: no seaweedfs version in $mod/go.mod" >&2; exit 1; }
cached_go_build SeaweedFS weed "$version" "$mod" github.com/seaweedfs/seaweedfs/weed \
  "${1:-}" "$mod/go.mod" "$mod/go.sum"
