#!/bin/sh
# gpu-fleet: Slurm's RebootProgram. slurmd runs it as root when slurmctld asks this node to
# reboot (`scontrol reboot`: the health check asks for one once a fault a reboot fixes drained
# the node). A clean reboot: systemd stops slurmd and the mounts first.
logger -t gpu-fleet-health "rebooting for Slurm (scontrol reboot)" 2>/dev/null || true
exec /usr/bin/systemctl reboot
