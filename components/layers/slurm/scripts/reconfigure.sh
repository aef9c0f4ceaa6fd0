#!/bin/sh
# Runs `scontrol reconfigure` only if slurmctld or any slurmd started before slurm.conf was written.
# $1 the live slurm.conf.
# A daemon that started after the file was written already runs this config, and a needless
# `scontrol reconfigure` right before the canary races its launch: in Slurm 22.05 a step
# launched while slurmd reloads (with accounting, slurmd repacks the TRES list it hands to
# slurmstepd) can get a broken I/O init message (`srun: io_init_msg_unpack: unpack error`)
# although the task ran. After a real reconfigure, wait for the controller's agent to deliver
# it to every slurmd and give each a moment to reload: 22.05 reports no end of a slurmd reload.
# A SlurmdStartTime that `date` cannot read (a node that never started) is skipped.

set -eu
written=$(stat -c %Y -- "$1")
oldest=$(date -d "$(systemctl show -p ActiveEnterTimestamp --value slurmctld.service)" +%s)
for t in $(scontrol show node -o | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2); do
  s=$(date -d "$t" +%s 2>/dev/null) || continue
  [ "$s" -lt "$oldest" ] && oldest=$s
done
if [ "$oldest" -gt "$written" ]; then
  echo "slurmctld and every slurmd started after $1 was written: nothing to reconfigure"; exit 0
fi
scontrol reconfigure
for _ in $(seq 30); do
  [ "$(sdiag | awk -F: '/Agent queue size/ {gsub(/ /, "", $2); print $2; exit}')" = 0 ] && break
  sleep 1
done
sleep 2
