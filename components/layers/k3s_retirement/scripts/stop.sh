#!/bin/bash
# Retire K3s on this node, keeping everything: the marker file and a drop-in condition on it for
# every K3s unit (no upgrade or reboot starts them again), the units disabled and stopped, what
# K3s leaves behind a stop ended (KillMode=process: containerd shims and their pods, which hold
# GPUs), and what it leaves mounted under the kubelet and rancher paths unmounted. No uninstall,
# nothing deleted. Idempotent. $1 the marker file, $2 the change ID, $3 a colon-separated list of
# mount roots, then the units.
set -euo pipefail
marker="$1"; change="$2"; IFS=: read -r -a roots <<< "$3"; shift 3
mkdir -p -- "$(dirname -- "$marker")"
printf '%s\n' "$change" > "$marker.part" && mv -f -- "$marker.part" "$marker"
for u in "$@"; do
  d="/etc/systemd/system/$u.d"
  mkdir -p -- "$d"
  printf '# gpu-fleet: K3s retired (change %s); remove with the layer'"'"'s rollback\n[Unit]\nConditionPathExists=!%s\n' \
    "$change" "$marker" > "$d/gpu-fleet-retired.conf"
done
systemctl daemon-reload
for u in "$@"; do
  systemctl disable --now -- "$u" 2>&1 || true
done
leftovers() {
  local p cg comm
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
    cg=$(cat "/proc/$p/cgroup" 2>/dev/null) || continue
    case "$comm" in containerd-shim*) echo "$p"; continue ;; esac
    case "$cg" in *kubepods*) echo "$p"; continue ;; esac
    for u in "$@"; do case "$cg" in *"/$u"*) echo "$p"; break ;; esac; done
  done
}
for sig in TERM TERM TERM KILL KILL; do
  pids=$(leftovers "$@")
  [ -z "$pids" ] && break
  # shellcheck disable=SC2086 # one pid per word
  kill -s "$sig" $pids 2>/dev/null || true
  sleep 2
done
for r in "${roots[@]}"; do
  awk -v r="$r" '$2 == r || index($2, r "/") == 1 {print length($2), $2}' /proc/mounts
done | sort -rn | cut -d' ' -f2- | while IFS= read -r m; do
  umount -- "$m" 2>&1 || umount -l -- "$m"
done
