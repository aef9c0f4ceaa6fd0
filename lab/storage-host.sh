#!/bin/sh
# The lab's storage host as its admin leaves it: zfs-fuse running under the lab's drop-in, and
# the pool, mirrored on two sparse files, created once and imported. Idempotent.
# $1 pool  $2 vdev dir  $3 vdev size  $4 drop-in text  $5 mount helper text  $6 drop-in path
# $7 mount helper path. Prints what it changed, then "<pool> <health>" last.
set -eu
pool=$1 dir=$2 size=$3 dropin=$4 helper=$5 dropin_path=$6 helper_path=$7
changed=

put() {  # put PATH MODE TEXT: write TEXT (plus a newline) to PATH unless it holds that already
  if [ "$(cat "$1" 2>/dev/null)" != "$3" ]; then
    mkdir -p "$(dirname "$1")"
    printf '%s\n' "$3" > "$1.tmp"
    chmod "$2" "$1.tmp"
    mv -f "$1.tmp" "$1"
    changed=1
  fi
}

# Before the package: zfs-fuse's postinst starts the service, which without the drop-in fails
# in a container and leaves an orphaned daemon behind.
put "$helper_path" 0755 "$helper"
put "$dropin_path" 0644 "$dropin"
[ -z "$changed" ] || systemctl daemon-reload
if [ "$(dpkg-query -W -f '${db:Status-Status}' zfs-fuse 2>/dev/null)" != installed ]; then
  log=$(mktemp)
  if ! { apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q zfs-fuse; } \
      > "$log" 2>&1; then
    tail -n 20 "$log" >&2
    exit 1
  fi
  rm -f "$log"
  echo "installed zfs-fuse $(dpkg-query -W -f '${Version}' zfs-fuse)"
elif [ -n "$changed" ]; then
  systemctl restart zfs-fuse
  echo "restarted zfs-fuse (new drop-in)"
fi
systemctl is-active -q zfs-fuse || systemctl start zfs-fuse

if ! zpool list -H -o name "$pool" > /dev/null 2>&1; then
  if [ -e "$dir/$pool-0.img" ] && [ -e "$dir/$pool-1.img" ]; then
    # zfs-fuse has no `import -N`, and its import mounts every dataset read-write (readonly=on
    # then reads "off", source temporary): unmount them all and mount them as a boot does.
    zpool import -d "$dir" "$pool"
    zfs unmount -a
    "$helper_path"
    echo "imported pool $pool"
  else
    mkdir -p "$dir"
    truncate -s "$size" "$dir/$pool-0.img" "$dir/$pool-1.img"
    zpool create -m none "$pool" mirror "$dir/$pool-0.img" "$dir/$pool-1.img" 2>&1 \
      | grep -v '^Defaulting to 4K blocksize' >&2 || true
    zpool list -H -o name "$pool" > /dev/null
    echo "created pool $pool (mirror of two $size sparse files in $dir)"
  fi
fi
zpool list -H -o name,health "$pool"
