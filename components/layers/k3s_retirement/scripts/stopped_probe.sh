#!/bin/bash
# Read-only: is K3s retired on this node? The units' enablement, activity and drop-in, the
# marker, K3s processes left (shims, pods, anything in a K3s unit's cgroup), processes holding a
# GPU device, mounts under the kubelet and rancher paths.
# $1 the marker file, $2 the GPU device prefix, $3 gpu_holders.sh, $4 colon-separated mount
# roots, then the units.
marker="$1"; prefix="$2"; holders="$3"; IFS=: read -r -a roots <<< "$4"; shift 4
echo "== units"
for u in "$@"; do
  drop=no; [ -f "/etc/systemd/system/$u.d/gpu-fleet-retired.conf" ] && drop=yes
  echo "$u $(systemctl is-enabled -- "$u" 2>/dev/null || true) $(systemctl is-active -- "$u" 2>/dev/null || true) $drop"
done
echo "== marker"; cat -- "$marker" 2>/dev/null
echo "== k3s_procs"
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
  cg=$(cat "/proc/$p/cgroup" 2>/dev/null) || continue
  hit=
  case "$comm" in containerd-shim*|k3s*|kine|kube-apiserver|containerd) hit=1 ;; esac
  case "$cg" in *kubepods*) hit=1 ;; esac
  for u in "$@"; do case "$cg" in *"/$u"*) hit=1 ;; esac; done
  [ -n "$hit" ] && echo "$p $comm"
done
echo "== gpu_holders"
bash -c "$holders" bash "$prefix"
echo "== mounts"
for r in "${roots[@]}"; do
  awk -v r="$r" '$2 == r || index($2, r "/") == 1 {print $2, $3}' /proc/mounts
done
