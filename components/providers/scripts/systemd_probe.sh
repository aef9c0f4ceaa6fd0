#!/bin/sh
# Reads a unit: the SHA-256 of each managed file, then `systemctl show` of its states.
# $1 the unit, then its managed file paths. $PROPS is a template slot, not a variable:
# systemd.py replaces it with the "-p Name" options of the live properties it checks.

u="$1"; shift
for f in "$@"; do
  if [ -f "$f" ]; then echo "file $f $(sha256sum -- "$f" | cut -d' ' -f1)"; else echo "file $f absent"; fi
done
echo "== show"
# A mount unit that systemd calls active may still serve nothing: a network mount whose server
# handles went stale (the store mounted again under it) answers ESTALE. Read its root, bounded.
where_opt=""
case "$u" in *.mount) where_opt="-p Where" ;; esac
# shellcheck disable=SC2086 # the slot's -p options (see above) and $where_opt must split into words
show=$(systemctl show "$u" -p LoadState -p ActiveState -p UnitFileState -p NeedDaemonReload $where_opt $PROPS 2>/dev/null)
printf '%s\n' "$show"
where=$(printf '%s\n' "$show" | sed -n 's/^Where=//p')
if [ -n "$where" ] && printf '%s\n' "$show" | grep -qx 'ActiveState=active'; then
  echo "== reach"
  if err=$(timeout -k 2 10 stat -c %d -- "$where/." 2>&1 >/dev/null); then echo ok; else echo "${err:-stat timed out}"; fi
fi
