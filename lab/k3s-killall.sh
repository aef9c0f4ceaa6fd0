#!/bin/bash
# /usr/local/bin/k3s-killall.sh on a lab node (lab/k3s.py), as K3s's installer writes one: stop
# the K3s services, kill what KillMode=process leaves (the containerd-shim-runc-v2 processes and
# anything run from K3s's parts), unmount what the pods left under /var/lib/kubelet,
# /var/lib/rancher and /run/k3s. Nothing is disabled or deleted.
set -uo pipefail
for u in k3s-agent k3s; do systemctl stop "$u.service" >/dev/null 2>&1 || true; done
for p in /proc/[0-9]*; do
  comm="$(cat "$p/comm" 2>/dev/null)" || continue
  exe="$(readlink "$p/exe" 2>/dev/null)" || exe=""
  case "$comm:$exe" in
    containerd-shim:*|*:/srv/lab-k3s/*) kill -9 "${p#/proc/}" 2>/dev/null || true ;;
  esac
done
for base in /var/lib/kubelet /var/lib/rancher /run/k3s; do
  awk -v b="$base" '$2 == b || index($2, b "/") == 1 {print $2}' /proc/self/mounts | sort -r \
    | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
done
left="$(awk '$2 ~ "^/(var/lib/(kubelet|rancher)|run/k3s)(/|$)" {print $2}' /proc/self/mounts)"
[ -z "$left" ] || { echo "$(hostname): still mounted: $left" >&2; exit 1; }
exit 0
