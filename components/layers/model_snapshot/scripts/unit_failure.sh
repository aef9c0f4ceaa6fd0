#!/bin/sh
# Read-only: why the download unit's last run failed: its result and that run's journal lines.
# $1 the unit.

unit="$1"
systemctl show -p Result -p ExecMainStatus --value -- "$unit"
inv=$(systemctl show -p InvocationID --value -- "$unit")
if [ -n "$inv" ]; then journalctl --no-pager -o cat "_SYSTEMD_INVOCATION_ID=$inv" | tail -n 25
else journalctl --no-pager -o cat -u "$unit" -n 25; fi
