#!/bin/sh
# Writes the store marker (the dataset's name and GUID) at the root of a dataset, so that a
# client proves it sees this dataset and not an empty directory. A read-only dataset is made
# writable for the write and read-only again (remounted read-only where the property alone
# does not take effect, as with zfs-fuse).
# $1 dataset, $2 its mountpoint. Calls fact_mount_ro (components/facts/scripts/mounts.sh, sent
# ahead of this script).

set -eu
ds="$1"; mp="$2"
guid=$(zfs get -H -p -o value guid "$ds")
ro=$(zfs get -H -o value,source readonly "$ds" | cut -f1)
if [ "$ro" = on ]; then zfs set readonly=off "$ds"; fi
if fact_mount_ro "$mp"; then
  zfs unmount "$ds" && zfs mount "$ds"
fi
printf 'gpu-fleet store dataset=%s guid=%s\n' "$ds" "$guid" > "$mp/.gpu-fleet-store.new"
chmod 0444 "$mp/.gpu-fleet-store.new"
mv -f -- "$mp/.gpu-fleet-store.new" "$mp/.gpu-fleet-store"
if [ "$ro" = on ]; then zfs set readonly=on "$ds"; fi
