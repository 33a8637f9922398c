#!/usr/bin/env bash
# Build the cluster's images locally (no registry, no Docker engine) and import
# them into containerd's k8s.io namespace:
#   localhost/tooladapter-pause:dev     pod sandbox image (= containerd's sandbox_image)
#   localhost/tooladapter-sandbox:dev   Debian bookworm, distroless-style: busybox (POSIX
#                                       sh, coreutils-like applets, nc), curl, GNU wget,
#                                       CA certificates; runs as uid 65532
#   localhost/tooladapter-operator:dev  the operator (python3 -m tooladapter), no shell
# The sandbox and operator images come from hack/image (`make image`), cached under
# ~/.cache/tooladapter/images/ by their pinned inputs.
#
#   images.sh                    build + import into our containerd
#   images.sh --sandbox-archive  only write the sandbox image archive, print its path
#   images.sh --archives         only write the sandbox and operator archives, print them
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# The checkout's venv has pip (the operator image installs wheels with it); Debian's
# python3 may not.
PYTHON="$REPO_ROOT/.venv/bin/python3"
[ -x "$PYTHON" ] || PYTHON=python3
build_images() {
  PYTHONPATH="$REPO_ROOT/hack${PYTHONPATH:+:$PYTHONPATH}" \
    "$PYTHON" -m image "$@" --tag dev --load no
}

case "${1:-}" in
  --sandbox-archive) build_images sandbox; exit 0 ;;
  --archives) build_images sandbox operator; exit 0 ;;
esac

out="$CLUSTER_DIR/images"
mkdir -p "$out"
mapfile -t archives < <(build_images sandbox operator)
[ -x "$BIN_DIR/pause" ] || "$CLUSTER_HACK_DIR/build.sh" >/dev/null
python3 "$CLUSTER_HACK_DIR/mkimage.py" binary --binary "$BIN_DIR/pause" \
  --tag "$PAUSE_IMAGE" --out "$out/pause.tar" >/dev/null

for a in "$out/pause.tar" "${archives[@]}"; do
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$a" >/dev/null
done
log "imported $PAUSE_IMAGE, $SANDBOX_IMAGE and localhost/tooladapter-operator:dev"
