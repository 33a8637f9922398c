#!/usr/bin/env bash
# Build the OAuth 2.0 server the minted-credential tests mint from (client credentials, token
# exchange, revocation: main.go, on zitadel/oidc's op package) from this pinned wrapper module
# into the binary cache, outside the repo. A no-op when cached.
#
#   hack/oauth/build.sh          build if needed, print the binary's path
#   hack/oauth/build.sh --force  rebuild
set -euo pipefail
. "$(dirname "$0")/../gobuild.sh"

mod="$(cd "$(dirname "$0")" && pwd)"
version="$(awk '$1=="github.com/zitadel/oidc/v3" {print $2; exit}' "$mod/go.mod")"
[ -n "$version" ] || { echo "[oauth-build] error: no zitadel/oidc version in $mod/go.mod" >&2; exit 1; }
cached_go_build "the OAuth test server" oauth-server "$version" "$mod" . \
  "${1:-}" "$mod/go.mod" "$mod/go.sum" "$mod/main.go"
