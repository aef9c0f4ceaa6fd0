#!/bin/sh
# Makes a dataset writable on its own host: `zfs set readonly=off`, then, where the live mount
# stays read-only (zfs-fuse), a remount. zfs refuses to unmount a dataset an NFS server holds
# open; real ZFS applies the property to the live mount and needs no remount.
# $1 dataset, $2 its mountpoint. Calls fact_mount_ro (components/facts/scripts/mounts.sh, sent
# ahead of this script).

set -eu
zfs set readonly=off "$1"
if fact_mount_ro "$2"; then
  zfs unmount "$1"
  for _ in 1 2 3 4 5; do zfs mount "$1" && exit 0; sleep 1; done
  echo "cannot mount $1 read-write at $2" >&2; exit 1
fi
