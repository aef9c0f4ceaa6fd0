#!/bin/bash
# Read-only: what the runtime really runs as container $1. Sections: `inspect` (podman's JSON),
# `status` (the container process's credentials, capabilities, no_new_privs from /proc),
# `limits` (memory, pids and CPU limits as the kernel's cgroup files hold them), `unit`.
set -uo pipefail
name=$1 unit=$2
echo "== unit"
systemctl is-active "$unit" 2>/dev/null
systemctl is-enabled "$unit" 2>/dev/null
if ! podman container exists "$name" 2>/dev/null; then echo "== absent"; exit 0; fi
echo "== inspect"
podman container inspect "$name"
pid=$(podman container inspect -f '{{.State.Pid}}' "$name")
[ "${pid:-0}" -gt 0 ] || exit 0
echo "== status"
grep -E '^(Uid|Gid|CapEff|CapBnd|NoNewPrivs):' "/proc/$pid/status"
echo "== limits"
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  path=$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
  d=/sys/fs/cgroup$path
  echo "memory $(cat "$d/memory.max")"
  echo "pids $(cat "$d/pids.max")"
  echo "cpu $(cat "$d/cpu.max")"
else
  while IFS=: read -r _ ctrls path; do
    case ",$ctrls," in
      *,memory,*) echo "memory $(cat "/sys/fs/cgroup/memory$path/memory.limit_in_bytes")" ;;
      *,pids,*) echo "pids $(cat "/sys/fs/cgroup/pids$path/pids.max")" ;;
      *,cpu,*) echo "cpu $(cat "/sys/fs/cgroup/cpu$path/cpu.cfs_quota_us") $(cat "/sys/fs/cgroup/cpu$path/cpu.cfs_period_us")" ;;
    esac
  done <"/proc/$pid/cgroup"
fi
