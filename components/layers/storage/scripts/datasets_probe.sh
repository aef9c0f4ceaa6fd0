#!/bin/sh
# Reads the pool and the layer's datasets in one round trip, read-only.
# $1 pool, $2 the data dataset's mountpoint, then "dataset mountpoint" pairs; then "--dirs"
# and the data directories.
# Sections: == pool (zpool list, or its error), == status (zpool status), == props (zfs get),
# == mount <dataset> (findmnt -T of its mountpoint), == marker <dataset>, == dir <name> (mode).
# Calls fact_* (components/facts/scripts/{mounts,zfs}.sh, sent ahead of this script).

pool="$1"; data="$2"; shift 2
echo "== pool"
fact_zpool_health "$pool"
echo "== status"
zpool status "$pool" 2>&1
names=""
while [ "$#" -gt 0 ] && [ "$1" != --dirs ]; do
  ds="$1"; mp="$2"; shift 2
  names="$names $ds"
  echo "== mount $ds"
  fact_mount -T "$mp" TARGET,SOURCE,FSTYPE,OPTIONS,ID,MAJ:MIN
  echo "== marker $ds"
  cat -- "$mp/.gpu-fleet-store" 2>/dev/null
done
echo "== props"
# shellcheck disable=SC2086 # $names: dataset names (no spaces), one argument each
[ -n "$names" ] && fact_zfs_get mountpoint,readonly,canmount,sharenfs,mounted,guid $names
[ "${1:-}" = --dirs ] && shift
for d in "$@"; do
  echo "== dir $d"
  stat -c '%a' -- "$data/$d" 2>/dev/null
done
echo "== end"
