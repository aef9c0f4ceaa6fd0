#!/bin/sh
# The lab storage host's /usr/local/sbin/zfs-mount-lab (lab/storage.py installs it): wait for
# zfs-fuse's socket, then mount every dataset, those with readonly=on with `-o ro`.
# zfs-fuse does not turn readonly=on into a read-only mount: mounted without `-o ro` such a
# dataset is writable and `zfs get readonly` says "off" (source "temporary").
# Run by zfs-fuse.service (ExecStartPost of the lab's drop-in) and after a `zpool import -N`.
set -u
i=0
while [ ! -S /run/zfs/zfs_socket ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -S /run/zfs/zfs_socket ] || { echo "zfs-mount-lab: zfs-fuse's socket never appeared" >&2; exit 1; }
# zfs-fuse imports the pools of its cache file after its socket appears: mounting before that
# mounts nothing (a rebooted storage host came back with its pool ONLINE, its datasets not
# mounted). Wait for a pool, 10 s at most (an exported pool stays exported).
i=0
while [ -z "$(zpool list -H -o name 2>/dev/null)" ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
zfs list -H -o name,readonly,canmount,mounted -t filesystem | while read -r name ro canmount mounted; do
  if [ "$ro" = on ] && [ "$canmount" = on ] && [ "$mounted" = no ]; then
    zfs mount -o ro "$name" || echo "zfs-mount-lab: zfs mount -o ro $name failed" >&2
  fi
done
exec zfs mount -a
