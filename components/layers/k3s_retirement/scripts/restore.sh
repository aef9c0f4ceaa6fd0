#!/bin/bash
# Roll a retirement back on this node: the drop-in conditions and the marker removed, then the
# units the baseline found enabled enabled again and those it found active started, in the
# order given (the caller starts the server before any agent). $1 the marker file, $2 a
# colon-separated list of units to enable, $3 of units to start, then every K3s unit.
set -euo pipefail
marker="$1"; IFS=: read -r -a enable <<< "$2"; IFS=: read -r -a start <<< "$3"; shift 3
for u in "$@"; do rm -f -- "/etc/systemd/system/$u.d/gpu-fleet-retired.conf"; rmdir -- "/etc/systemd/system/$u.d" 2>/dev/null || true; done
rm -f -- "$marker"
systemctl daemon-reload
for u in "${enable[@]}"; do systemctl enable -- "$u"; done
for u in "${start[@]}"; do systemctl start -- "$u"; done
