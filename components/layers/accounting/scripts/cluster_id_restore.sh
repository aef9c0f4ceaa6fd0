#!/bin/sh
# Puts the kept clustername file back once slurm.conf no longer uses slurmdbd.
# $1 state file, $2 kept copy, $3 its SHA-256, $4 slurm.conf. slurmctld reads and writes the file only when
# it starts, and by now runs without accounting: it takes the kept ID at its next start.
# (Restarting it here would close the partitions the acceptance opened.)

set -eu
f="$1"; keep="$2"
if [ ! -d "$(dirname -- "$f")" ]; then echo "no controller state left; nothing to restore"; exit 0; fi
[ -f "$keep" ] || { echo "the kept clustername $keep is gone" >&2; exit 3; }
[ "$(sha256sum -- "$keep" | cut -d' ' -f1)" = "$3" ] || { echo "the kept clustername $keep does not match its recorded SHA-256" >&2; exit 4; }
if grep -qs '^AccountingStorageType=accounting_storage/slurmdbd' "$4"; then
  echo "slurm.conf still uses slurmdbd: the controller's own ClusterID would fail its next start" >&2; exit 5
fi
t="$f.gpu-fleet.tmp"
cp -p -- "$keep" "$t"; mv -f -- "$t" "$f"
echo "restored $f from $keep"
