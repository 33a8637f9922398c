#!/usr/bin/env bash
# Build the OpenTelemetry Collector the tracing tests export to (only the OTLP receiver and
# the file exporter, main.go) from this pinned wrapper module into the binary cache, outside
# the repo. A no-op when cached.
#
#   hack/otel/build.sh          build if needed, print the binary's path
#   hack/otel/build.sh --force  rebuild
set -euo pipefail

OTEL_HACK_DIR="$(cd "$(dirname "$0")" && pwd)"
TA_CACHE="${TOOLADAPTER_CACHE:-$HOME/.cache/tooladapter}"
log() { echo "[otel-build] $*" >&2; }
die() { log "error: $*"; exit 1; }

version="$(awk '$1=="go.opentelemetry.io/collector/otelcol" {print $2; exit}' "$OTEL_HACK_DIR/go.mod")"
[ -n "$version" ] || die "no go.opentelemetry.io/collector/otelcol version in $OTEL_HACK_DIR/go.mod"
# The key changes with the pinned module graph, the program and the Go toolchain.
key="$( { go env GOVERSION 2>/dev/null || echo none; cat "$OTEL_HACK_DIR/go.mod" \
  "$OTEL_HACK_DIR/go.sum" "$OTEL_HACK_DIR/main.go"; } | sha256sum | cut -c1-12)"
BIN="$TA_CACHE/bin/otelcol-$version-$key"

if [ "${1:-}" != "--force" ] && [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || die "go is required to build the OpenTelemetry Collector"
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
log "building the OpenTelemetry Collector $version (a cold build takes a few minutes)"
start=$SECONDS
tmp="$BIN.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(cd "$OTEL_HACK_DIR" && go build -p "${BUILD_JOBS:-2}" -trimpath -ldflags "-s -w" -o "$tmp" .)
mv "$tmp" "$BIN"
trap - EXIT
log "built $BIN in $((SECONDS - start))s"
echo "$BIN"
