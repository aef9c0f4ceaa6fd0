#!/bin/sh
# What the NFS server really exports, read-only, with the stores' mounts as the kernel shows them.
# $1 "ganesha" or "kernel", then "dataset mountpoint export_id" triples.
# Sections: == mount <dataset>, == ganesha <id> (DisplayExport over DBus), == exportfs, == nfsd.
# Calls fact_mount (components/facts/scripts/mounts.sh, sent ahead of this script).

kind="$1"; shift
while [ "$#" -gt 0 ]; do
  echo "== mount $1"
  fact_mount -T "$2"
  if [ "$kind" = ganesha ]; then
    echo "== ganesha $3"
    dbus-send --system --print-reply --dest=org.ganesha.nfsd /org/ganesha/nfsd/ExportMgr \
      org.ganesha.nfsd.exportmgr.DisplayExport "uint16:$3" 2>&1
  fi
  shift 3
done
if [ "$kind" = kernel ]; then
  echo "== exportfs"
  exportfs -v 2>&1
  echo "== nfsd"
  cat /proc/fs/nfsd/exports 2>&1
fi
echo "== end"
