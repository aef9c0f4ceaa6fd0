#!/bin/sh
# Waits until this host's slurmctld answers `scontrol ping`, so the nodes' slurmd start only once
# it listens. systemd calls slurmctld active when its process starts (Type=simple in 22.05);
# a slurmd that starts before the controller listens fails its registration and is only seen
# at slurmctld's next ping of the node (SlurmdTimeout/3, 100 s by default), which is how long
# the canary gate then waited. $1 seconds to wait.

end=$(( $(date +%s) + $1 ))
while :; do
  if out=$(scontrol ping 2>&1) && echo "$out" | grep -q ' is UP'; then echo "$out"; exit 0; fi
  if [ "$(date +%s)" -ge "$end" ]; then echo "slurmctld does not answer after $1 s: $out" >&2; exit 1; fi
  sleep 0.5
done
