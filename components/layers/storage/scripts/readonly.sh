#!/bin/sh
# Makes a dataset read-only, as the mount shows it: `zfs set readonly=on`, then, where the
# property does not reach the live mount (zfs-fuse reports "off temporary"), a remount
# read-only. A dataset busy with an export is refused by zfs; the caller orders exports after.
# $1 dataset, $2 its mountpoint. Calls fact_mount_ro (components/facts/scripts/mounts.sh, sent
# ahead of this script).

set -eu
zfs set readonly=on "$1"
if ! fact_mount_ro "$2"; then
  zfs unmount "$1"
  for _ in 1 2 3 4 5; do zfs mount -o ro "$1" && exit 0; sleep 1; done
  echo "cannot mount $1 read-only at $2" >&2; exit 1
fi
