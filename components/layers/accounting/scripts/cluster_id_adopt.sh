#!/bin/sh
# Stops slurmctld, keeps the controller's clustername file (hash-checked), writes the DBD's ID into it.
# $1 state file, $2 kept copy's name (a UTC stamp is added), $3 the file's expected SHA-256, $4 new content.

set -eu
f="$1"; keep="$2.$(date -u +%Y%m%dT%H%M%SZ)"
systemctl stop slurmctld.service
[ "$(sha256sum -- "$f" | cut -d' ' -f1)" = "$3" ] || { echo "$f changed since it was read" >&2; exit 3; }
install -d -m 0700 "$(dirname -- "$keep")"
cp -p -- "$f" "$keep.tmp"; sync "$keep.tmp"
[ "$(sha256sum -- "$keep.tmp" | cut -d' ' -f1)" = "$3" ] || { echo "the kept copy differs from $f" >&2; exit 4; }
mv -f -- "$keep.tmp" "$keep"
t="$f.gpu-fleet.tmp"
printf '%s' "$4" > "$t"; chown --reference="$f" "$t"; chmod --reference="$f" "$t"; mv -f -- "$t" "$f"
echo "kept $keep"
