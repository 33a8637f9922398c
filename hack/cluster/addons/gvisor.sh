# shellcheck shell=bash
# gVisor (issue 29), sourced by addons.sh: the RuntimeClass `gvisor` (handler
# `runsc`), under which `sandbox.kind: GVisor` calls run (the operator's
# TOOLADAPTER_RUNTIME_CLASSES maps GVisor=gvisor). Nothing from apt: runsc and
# containerd-shim-runsc-v1 are built by build.sh from the pinned module in
# hack/cluster/gvisor (the shim with gvisor/patch.py applied for containerd 1.6)
# into the add-on cache. containerd's config (up.sh) names the shim by its cached
# path (runtime_path) and points the runtime's options at $CONF/runsc.toml, which
# the shim reads at each container create: runsc's own flags change there without
# a containerd restart.
#
# Platform: systrap (seccomp traps, no KVM needed; these VMs have no /dev/kvm).
#   CLUSTER_RUNSC_PLATFORM=ptrace make cluster-up     the slower fallback
#   CLUSTER_RUNSC_DEBUG=1 make cluster-up             runsc and shim debug logs under
#                                                     .cluster/logs/runsc/<container>/
# Kata Containers is not offered: it needs KVM (nested virtualisation), which
# these VMs lack.

GVISOR_RUNTIME_CLASS=gvisor
GVISOR_HANDLER=runsc

# runsc_config: the shim's options file (binary_name, root, runsc flags).
runsc_config() {
  cat <<EOT
# Written by hack/cluster/addons/gvisor.sh: containerd-shim-runsc-v1's options.
binary_name = "$(addon_bin runsc)"
root = "$RUN_DIR/runsc"
EOT
  if [ "${CLUSTER_RUNSC_DEBUG:-0}" = 1 ]; then
    cat <<EOT
log_level = "debug"
log_path = "$CLUSTER_DIR/logs/runsc/%ID%/shim.log"
EOT
  fi
  cat <<EOT

[runsc_config]
  platform = "${CLUSTER_RUNSC_PLATFORM:-systrap}"
EOT
  if [ "${CLUSTER_RUNSC_DEBUG:-0}" = 1 ]; then
    cat <<EOT
  debug = "true"
  debug-log = "$CLUSTER_DIR/logs/runsc/%ID%/"
EOT
  fi
}

# ensure_gvisor: the options file and the RuntimeClass (containerd's runtime entry
# is part of containerd_config, applied by ensure_containerd_config).
ensure_gvisor() {
  runsc_config | write_file "$CONF/runsc.toml" || true
  apply_manifest gvisor.yaml NAME="$GVISOR_RUNTIME_CLASS" HANDLER="$GVISOR_HANDLER"
}
