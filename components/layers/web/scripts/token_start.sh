#!/bin/bash
# Mints the agent's token with the token unit $1 as the layer has just written and loaded it. A
# renewal its timer started before that runs the unit's old definition (another lifetime, which
# the timer as now set would not renew in time), and `systemctl start` would only join it: that
# one is waited out first, then the unit started anew.
set -euo pipefail
unit=$1
if [ "$(systemctl show -p ActiveState --value "$unit")" = activating ]; then
  systemctl start "$unit"
fi
systemctl start "$unit"
