#!/usr/bin/env bash
# Run the S3-compatible test server (SeaweedFS `weed mini`: master, volume server, filer
# and S3 gateway in one process) in the foreground, on loopback only, storing in DATA_DIR.
#
#   hack/s3/run.sh DATA_DIR
#
# Environment (ports default to SeaweedFS's own; the tests pass free ones):
#   S3_PORT (8333), S3_MASTER_PORT (9333), S3_VOLUME_PORT (9340), S3_FILER_PORT (8888),
#   S3_GRPC_PORTS: four gRPC ports "master,volume,filer,s3" (default: each port + 10000)
#   S3_ADMIN_PORTS: "http,grpc" of the admin server mini always runs (12535,22535)
#   S3_CONFIG: an identities file (`-s3.config`); without one, AWS_ACCESS_KEY_ID and
#   AWS_SECRET_ACCESS_KEY name the one (admin) identity
#   S3_BUCKETS: comma-separated buckets to create at start
set -euo pipefail

data="${1:?usage: hack/s3/run.sh DATA_DIR}"
weed="$("$(dirname "$0")/build.sh")"
mkdir -p "$data"

port="${S3_PORT:-8333}"
master="${S3_MASTER_PORT:-9333}"
volume="${S3_VOLUME_PORT:-9340}"
filer="${S3_FILER_PORT:-8888}"
IFS=, read -r admin g_admin <<<"${S3_ADMIN_PORTS:-12535,22535}"
IFS=, read -r g_master g_volume g_filer g_s3 <<<"${S3_GRPC_PORTS:-$((master + 10000)),$((volume + 10000)),$((filer + 10000)),$((port + 10000))}"

args=(
  -dir="$data" -ip=127.0.0.1 -ip.bind=127.0.0.1
  -master.port="$master" -master.port.grpc="$g_master"
  -volume.port="$volume" -volume.port.grpc="$g_volume"
  -filer.port="$filer" -filer.port.grpc="$g_filer"
  -s3.port="$port" -s3.port.grpc="$g_s3"
  -admin.port="$admin" -admin.port.grpc="$g_admin" -admin.port.legacy=0
  -filer.localSocket="$data/filer.sock" -s3.localSocket="$data/s3.sock"
  # Only S3: no WebDAV, admin UI, Iceberg or Lance listeners, no embedded IAM API, and
  # no telemetry (this machine has no internet; a test server should not call home).
  -webdav=false -admin.ui=false -s3.port.iceberg=0 -s3.port.lance=0 -s3.iam=false
  -master.telemetry=false -master.volumeSizeLimitMB=64
)
[ -n "${S3_CONFIG:-}" ] && args+=(-s3.config="$S3_CONFIG")
[ -n "${S3_BUCKETS:-}" ] && args+=(-bucket="$S3_BUCKETS")
exec "$weed" mini "${args[@]}"
