#!/usr/bin/env bash
# Stop the local cluster and remove its state (the binary cache is kept).
#
# Stops, by recorded pid, every component started by up.sh from any checkout
# on this machine (pids are registered in ~/.cache/tooladapter/run/pids), the
# kube-proxy add-on included, then the pod containers (descendants of our
# containerd's shims, and anything left in the kubepods cgroups: CoreDNS and
# local-path too), and removes mounts, network namespaces, the CNI bridge,
# iptables/ip6tables chains (kube-proxy's Service rules among them), ipsets,
# /var/lib/tooladapter (local-path volumes among it), /run/tooladapter and
# .cluster/.
#
#   down.sh                 full stop, removes .cluster/
#   down.sh --for-restart   used by up.sh: keeps .cluster/pki and old logs
set -euo pipefail
. "$(dirname "$0")/lib.sh"

for_restart=0
[ "${1:-}" = "--for-restart" ] && for_restart=1

if [ "${CLUSTER:-local}" = kind ] && [ "$for_restart" = 0 ]; then
  exec "$CLUSTER_HACK_DIR/kind-down.sh"
fi
[ "$(id -u)" = 0 ] || die "stopping the local cluster needs root"
if [ "$for_restart" = 0 ]; then
  mkdir -p "$TA_RUN/pids"
  exec 8>"$TA_RUN/lock"
  flock -w 600 8 || die "another cluster-up/cluster-down holds $TA_RUN/lock"
fi

stopped=0

# stop_pid NAME PID [TIMEOUT]: SIGTERM, wait up to TIMEOUT (default 10) seconds,
# then SIGKILL.
stop_pid() {
  local name="$1" pid="$2" timeout="${3:-10}" i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 $((timeout * 10))); do
    proc_alive "$pid" || break
    sleep 0.1
  done
  if proc_alive "$pid"; then
    [ "$name" = containerd ] || log "$name (pid $pid) did not stop on SIGTERM; killing"
    kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do proc_alive "$pid" || break; sleep 0.1; done
  fi
  stopped=$((stopped + 1))
}

stop_component() {
  local name="$1" dir pid
  for dir in "$TA_RUN/pids" "$CLUSTER_DIR/pids"; do
    if pid="$(component_pid "$name" "$dir")"; then
      log "stopping $name (pid $pid)"
      # containerd 1.6 often hangs in its shutdown after "Stop CRI service";
      # by then every pod is gone and its state is wiped below anyway.
      if [ "$name" = containerd ]; then stop_pid "$name" "$pid" 3; else stop_pid "$name" "$pid"; fi
    fi
  done
}

# Pod processes: descendants of the shims of our containerd, and anything in
# the kubepods cgroups (e.g. reparented after a shim was killed).
shim_pids() {
  local p
  for p in /proc/[0-9]*; do
    case "$(readlink "$p/exe" 2>/dev/null)" in
      */containerd-shim*) tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$CONTAINERD_SOCK" \
                            && echo "${p#/proc/}" ;;
    esac
  done
}
descendants() {
  local parent="$1" child
  for child in $(ps -o pid= --ppid "$parent" 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}
kubepods_pids() {
  grep -lE '^[0-9]+:[^:]*:/kubepods(/|$)' /proc/[0-9]*/cgroup 2>/dev/null | awk -F/ '{print $3}' || true
}
kill_pods() {
  local shims pods p
  shims="$(shim_pids)"
  pods="$(for p in $shims; do descendants "$p"; done; kubepods_pids)"
  pods="$(echo "$pods" | sort -u | grep -v '^$' || true)"
  if [ -n "$pods" ]; then
    log "killing $(echo "$pods" | wc -l) pod process(es)"
    # shellcheck disable=SC2086
    kill -KILL $pods 2>/dev/null || true
  fi
  for p in $shims; do stop_pid containerd-shim "$p"; done
  for p in $(kubepods_pids); do kill -KILL "$p" 2>/dev/null || true; done
}

# Reverse start order; pods are killed once the kubelet cannot restart them.
for c in $ADDON_COMPONENTS kube-router kubelet; do stop_component "$c"; done
kill_pods
for c in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop_component "$c"; done
kill_pods

# --------------------------------------------------------- host cleanup ----

# Mounts under our state dirs (pod volumes, overlay rootfs, shm), deepest first.
findmnt -rn -o TARGET | grep -E "^($VAR_DIR|$RUN_DIR)(/|$)" | sort -r | while read -r m; do
  umount -l "$(printf '%b' "$m")" 2>/dev/null || true
done || true
# Network namespaces created by containerd's CRI for our pods.
if [ -d /var/run/netns ]; then
  for ns in /var/run/netns/cni-*; do
    [ -e "$ns" ] || continue
    umount -l "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
fi
ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && ip link delete "$CNI_BRIDGE" || true
rm -f "$CNI_CONF"

# iptables: chains of kube-router (KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*,
# KUBE-SRC-*, KUBE-DST-*), of kube-proxy and the kubelet (KUBE-*) and of the
# CNI plugins (CNI-*); kube-proxy and the kubelet write ip6tables too.
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  for t in filter nat mangle; do
    "$ipt" -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j (KUBE-|CNI-)' | grep -vE '^-A (KUBE-|CNI-)' \
      | while read -r rule; do eval "$ipt -t $t -D ${rule#-A }" 2>/dev/null || true; done || true
    chains="$("$ipt" -t "$t" -S 2>/dev/null | awk '$1=="-N" && ($2 ~ /^KUBE-/ || $2 ~ /^CNI-/) {print $2}' || true)"
    for ch in $chains; do "$ipt" -t "$t" -F "$ch" 2>/dev/null || true; done
    for ch in $chains; do "$ipt" -t "$t" -X "$ch" 2>/dev/null || true; done
  done
done
if command -v ipset >/dev/null; then
  for s in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)' || true); do
    ipset destroy "$s" 2>/dev/null || true
  done
fi
# Empty pod cgroups.
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

rm -rf --one-file-system "$VAR_DIR" "$RUN_DIR"
rm -f "$TA_RUN"/pids/*.pid "$TA_RUN/owner"

if [ "$for_restart" = 1 ]; then
  if [ -d "$CLUSTER_DIR" ]; then
    rm -rf "$CLUSTER_DIR/etcd" "$CLUSTER_DIR/conf" "$CLUSTER_DIR/pids" "$CLUSTER_DIR/env" "$CLUSTER_DIR/bin"
    if [ -d "$CLUSTER_DIR/logs" ] && ls "$CLUSTER_DIR/logs"/*.log >/dev/null 2>&1; then
      rm -rf "$CLUSTER_DIR/logs/previous"; mkdir -p "$CLUSTER_DIR/logs/previous"
      mv "$CLUSTER_DIR/logs"/*.log "$CLUSTER_DIR/logs/previous/"
    fi
  fi
else
  rm -rf --one-file-system "$CLUSTER_DIR"
  log "cluster down ($stopped process(es) stopped); binary cache kept in $TA_CACHE"
fi
