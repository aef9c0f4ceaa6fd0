#!/bin/sh
# A node's view of the store, as root: each mount as the kernel shows it, each store's marker,
# a write into the read-only store (must fail), and one into the data store's job root (must
# succeed, owned by the squashed root, and be cleaned up).
# $1 models mount, $2 data mount, $3 job root directory name under the data mount.
# Calls fact_mount (components/facts/scripts/mounts.sh, sent ahead of this script).

models="$1"; data="$2"; jobs="$3"
# a write under a timeout (a hung NFS server must not hang the probe); $1 is the inner sh's
# shellcheck disable=SC2016
write='echo probe > "$1"'
for m in "$models" "$data"; do
  echo "== mount $m"
  fact_mount --mountpoint "$m"
  echo "== marker $m"
  timeout 20 cat -- "$m/.gpu-fleet-store" 2>&1
done
echo "== models-write"
f="$models/.gpu-fleet-probe-$(hostname)-$$"
if err=$(timeout 20 sh -c "$write" sh "$f" 2>&1); then
  echo "allowed"; rm -f -- "$f"
else
  echo "refused $err"
fi
echo "== data-write"
f="$data/$jobs/.gpu-fleet-probe-$(hostname)-$$"
if err=$(timeout 20 sh -c "$write" sh "$f" 2>&1); then
  echo "written uid=$(stat -c %u -- "$f")"
  rm -f -- "$f"
  if [ -e "$f" ]; then echo "left"; else echo "cleaned"; fi
else
  echo "refused $err"
fi
echo "== end"
