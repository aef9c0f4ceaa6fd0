#!/bin/sh
# Read-only: why the download unit's last run failed: its result and that run's journal lines
# (since the run started: a sandboxed unit's own output carries no invocation id to match).
# $1 the unit.

unit="$1"
systemctl show -p Result -p ExecMainStatus --value -- "$unit"
since=$(systemctl show --timestamp=unix -p InactiveExitTimestamp --value -- "$unit")
case "$since" in
  @*) journalctl --no-pager -o cat -u "$unit" --since "$since" | tail -n 25 ;;
  *) journalctl --no-pager -o cat -u "$unit" -n 25 ;;
esac
