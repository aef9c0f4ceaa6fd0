#!/bin/sh
# Mount facts as shell functions, sent ahead of a probe's own script (facts.shell("mounts"));
# components/facts/mounts.py parses what fact_mount prints. No positional arguments.

# fact_mount --mountpoint|-T PATH [COLUMNS]: the mount at PATH (--mountpoint) or the one that
# holds PATH (-T) as findmnt's KEY="value" pairs, its errors on the same stream (the parser
# skips them); COLUMNS defaults to TARGET,SOURCE,FSTYPE,OPTIONS.
fact_mount() {
  findmnt -n -P -o "${3:-TARGET,SOURCE,FSTYPE,OPTIONS}" "$1" "$2" 2>&1
}

# fact_mount_ro PATH: exits 0 when the mount at PATH is read-only (its options hold `ro`).
fact_mount_ro() {
  findmnt -n -o OPTIONS --mountpoint "$1" | tr , '\n' | grep -qx ro
}
