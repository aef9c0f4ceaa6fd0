#!/bin/sh
# Exits 0 only when ZFS says the dataset is mounted and the kernel's mount table shows that
# dataset at its mountpoint (never that the directory exists): the seed's empty /data.
# Installed on the storage host as the NFS server's ExecStartPre, once per store.
# $1 dataset, $2 mountpoint.

set -u
m=$(zfs get -H -o value mounted "$1" 2>&1)
if [ "$m" != yes ]; then
  echo "gpu-fleet: $1 is not mounted (zfs get mounted: $m); not exporting $2" >&2; exit 1
fi
src=$(findmnt -n -o SOURCE --mountpoint "$2")
if [ "$src" != "$1" ]; then
  echo "gpu-fleet: $2 is not the mountpoint of $1: findmnt -T shows $(findmnt -n -o TARGET,SOURCE,FSTYPE -T "$2"); not exporting it" >&2
  exit 1
fi
