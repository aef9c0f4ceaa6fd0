#!/bin/sh
# Exits 0 once ganesha answers on D-Bus: nfs-ganesha.service's ExecStartPost, so the unit is
# `active` only when the server serves. ganesha forks before it has read its exports and
# registered on the bus; without this, whatever follows the start (the layer's export check,
# units ordered after it) can find it running and not yet answering.
# $1: seconds to wait (render.GANESHA_READY_S).

set -u
limit=$1
end=$(($(date +%s) + limit))
while :; do
  if out=$(dbus-send --system --print-reply --reply-timeout=5000 --dest=org.ganesha.nfsd \
      /org/ganesha/nfsd/ExportMgr org.ganesha.nfsd.exportmgr.ShowExports 2>&1); then
    exit 0
  fi
  if [ "$(date +%s)" -ge "$end" ]; then
    echo "gpu-fleet: ganesha did not answer on D-Bus within $limit s: $out" >&2
    exit 1
  fi
  sleep 0.1
done
