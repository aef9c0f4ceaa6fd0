#!/bin/bash
# A K3s node's audit before retirement (read-only): CPU topology, memory, GPUs and who holds them,
# the K3s/Slurm/MUNGE/PostgreSQL services, mounts, NTP, cgroup version, root disk, slurmd -C.
# $1 the GPU device prefix (/dev/nvidia), $2 gpu_holders.sh, $3 the server unit, $4 the agent unit.
# Output: `== <name>` sections; the program parses and judges them.

prefix="$1"; holders="$2"; server="$3"; agent="$4"
echo "== cpus"; nproc --all
echo "== lscpu"; LC_ALL=C lscpu 2>/dev/null | grep -E '^(Socket\(s\)|Core\(s\) per socket|Thread\(s\) per core|Model name):' || true
echo "== mem_kib"; awk '/^MemTotal:/ {print $2}' /proc/meminfo
echo "== gpu_devices"
for d in "$prefix"[0-9]*; do [ -c "$d" ] && echo "$d"; done
echo "== nvidia_smi"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 60 nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader 2>&1 || true
fi
echo "== gpu_holders"
bash -c "$holders" bash "$prefix"
echo "== services"
for u in "$server" "$agent" slurmd.service munge.service postgresql.service; do
  echo "$u $(systemctl is-enabled "$u" 2>/dev/null || true) $(systemctl is-active "$u" 2>/dev/null || true)"
done
echo "== postgres"
pgrep -x postgres >/dev/null 2>&1 && echo running || echo none
echo "== mounts"
awk '$3 ~ /^(nfs|nfs4|fuse|fuse\..*|zfs)$/ || $2 ~ /^\/(var\/lib\/kubelet|var\/lib\/rancher|run\/k3s)/ {print $2, $3, $1}' /proc/mounts
echo "== ntp"
timedatectl show -p NTPSynchronized --value 2>/dev/null || echo unknown
echo "== cgroup"
stat -fc %T /sys/fs/cgroup 2>/dev/null
echo "== root_free_mib"
df -Pm / | awk 'NR==2 {print $4}'
echo "== slurmd_c"
if command -v slurmd >/dev/null 2>&1; then timeout 30 slurmd -C 2>&1 | head -1; fi
