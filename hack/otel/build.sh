#!/usr/bin/env bash
# Build the OpenTelemetry Collector the tracing tests export to (only the OTLP receiver and
# the file exporter, main.go) from this pinned wrapper module into the binary cache, outside
# the repo. A no-op when cached.
#
#   hack/otel/build.sh          build if needed, print the binary's path
#   hack/otel/build.sh --force  rebuild
set -euo pipefail
. "$(dirname "$0")/../gobuild.sh"

mod="$(cd "$(dirname "$0")" && pwd)"
version="$(awk '$1=="go.opentelemetry.io/collector/otelcol" {print $2; exit}' "$mod/go.mod")"
[ -n "$version" ] || { echo "[otel-build] error: no otelcol version in $mod/go.mod" >&2; exit 1; }
cached_go_build "the OpenTelemetry Collector" otelcol "$version" "$mod" . \
  "${1:-}" "$mod/go.mod" "$mod/go.sum" "$mod/main.go"
