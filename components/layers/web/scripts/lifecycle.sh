#!/bin/bash
# (Re)creates or removes one web container, as the seed's fix of its reapply race does: pause
# the watchdog's timer, wait for a watchdog run in progress to end, take the layer's lock, then
# act; the timer resumes on exit. $1 `apply` (the unit file's text on stdin: written, enabled,
# restarted, until its container runs) or `remove` (unit disabled and stopped, file and
# container removed), $2 unit, $3 container name, $4 watchdog timer, $5 watchdog service,
# $6 lock file.
set -euo pipefail
action=$1 unit=$2 name=$3 timer=$4 health=$5 lock=$6
path=/etc/systemd/system/$unit
timer_was=$(systemctl is-active "$timer" 2>/dev/null || true)
if [ "$timer_was" = active ]; then
  trap 'systemctl start "$timer"' EXIT
  systemctl stop "$timer"
fi
for _ in $(seq 600); do systemctl is-active -q "$health" || break; sleep 0.1; done
exec 9>"$lock"
flock -w 120 9 || { echo "could not take $lock within 120 s" >&2; exit 1; }
if [ "$action" = remove ]; then
  systemctl disable --now "$unit" 2>/dev/null || true
  rm -f "$path"
  systemctl daemon-reload
  podman rm -f --ignore "$name" >/dev/null
  exit 0
fi
tmp=$(mktemp "$path.XXXXXX")
cat >"$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$path"
systemctl daemon-reload
systemctl enable "$unit" 2>/dev/null
systemctl restart "$unit"
for _ in $(seq 300); do
  [ "$(podman container inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" = true ] && exit 0
  sleep 0.1
done
echo "container $name is not running 30 s after restarting $unit" >&2
systemctl status --no-pager "$unit" >&2 || true
exit 1
