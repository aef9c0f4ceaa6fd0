#!/bin/sh
# The end of a unit's journal, once journald has read what the unit wrote. $1 the unit, $2 how
# many lines, $3 journald's stream state directory, $4 the longest wait in tenths of a second.
# A daemon that exits at once leaves its last words in its stdout stream, which journald reads in
# its own time: on a busy host, `journalctl -u` right after the failure shows systemd's lines
# without the daemon's. journald keeps a state file per open stream (naming its unit) and
# removes it once it has read the stream to its end, so this waits until the unit has none.
n=0
while [ "$n" -lt "$4" ] && grep -qsxF "UNIT=$1" "$3"/* 2>/dev/null; do
  sleep 0.1
  n=$((n + 1))
done
exec journalctl -u "$1" -n "$2" --no-pager -o short-iso
