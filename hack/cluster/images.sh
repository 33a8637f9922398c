#!/usr/bin/env bash
# Build the cluster's images locally (no registry) and import them into
# containerd's k8s.io namespace:
#   localhost/tooladapter-pause:dev    pod sandbox image (= containerd's sandbox_image)
#   localhost/tooladapter-sandbox:dev  busybox-static: POSIX sh, coreutils-like
#                                      applets, nc, wget; runs as uid 65532
#
#   images.sh               build + import into our containerd
#   images.sh --sandbox-archive   only write the sandbox image archive, print its path
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out="$CLUSTER_DIR/images"
mkdir -p "$out"
busybox=/bin/busybox
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' \
  || die "$busybox is not statically linked: install busybox-static"
python3 "$CLUSTER_HACK_DIR/mkimage.py" busybox --busybox "$busybox" \
  --tag "$SANDBOX_IMAGE" --out "$out/sandbox.tar" >/dev/null
if [ "${1:-}" = "--sandbox-archive" ]; then
  echo "$out/sandbox.tar"
  exit 0
fi

[ -x "$BIN_DIR/pause" ] || "$CLUSTER_HACK_DIR/build.sh" >/dev/null
python3 "$CLUSTER_HACK_DIR/mkimage.py" binary --binary "$BIN_DIR/pause" \
  --tag "$PAUSE_IMAGE" --out "$out/pause.tar" >/dev/null

for a in pause sandbox; do
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$out/$a.tar" >/dev/null
done
log "imported $PAUSE_IMAGE and $SANDBOX_IMAGE"
