#!/bin/sh
# Waits until this host's slurmctld answers `scontrol ping`, so the nodes' slurmd start only once
# it listens. systemd calls slurmctld active when its process starts (Type=simple in 22.05),
# and a slurmd that starts before the controller listens cannot register at once: Slurm's
# quick-start has the controller up first. $1 seconds to wait.

end=$(( $(date +%s) + $1 ))
while :; do
  if out=$(scontrol ping 2>&1) && echo "$out" | grep -q ' is UP'; then echo "$out"; exit 0; fi
  if [ "$(date +%s)" -ge "$end" ]; then echo "slurmctld does not answer after $1 s: $out" >&2; exit 1; fi
  sleep 0.5
done
