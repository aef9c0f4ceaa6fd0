#!/bin/bash
# Installed on the controller as the web watchdog's job: restarts each enabled unit whose
# container is not running. $1 the layer's lock, then unit=container pairs. A reapply holding
# the lock owns the containers meanwhile: the watchdog then does nothing (the seed's race).
set -uo pipefail
lock=$1; shift
exec 9>"$lock"
if ! flock -n 9; then
  echo "a reapply holds $lock: leaving the containers to it"
  exit 0
fi
for pair in "$@"; do
  unit=${pair%%=*} name=${pair#*=}
  systemctl is-enabled -q "$unit" || continue
  running=$(podman container inspect -f '{{.State.Running}}' "$name" 2>/dev/null)
  if [ "$running" != true ]; then
    echo "restarting $unit: container $name is not running"
    systemctl restart "$unit"
  fi
done
