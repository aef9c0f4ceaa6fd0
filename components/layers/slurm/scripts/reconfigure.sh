#!/bin/sh
# Runs `scontrol reconfigure` only if slurmctld or any slurmd started before slurm.conf was written.
# $1 the live slurm.conf.
# A daemon that started after the file was written already runs this config, and a needless
# `scontrol reconfigure` right before the canary races its launch: in Slurm 22.05 a step
# launched while slurmd reloads (with accounting, slurmd repacks the TRES list it hands to
# slurmstepd) can get a broken I/O init message (`srun: io_init_msg_unpack: unpack error`)
# although the task ran. After a real reconfigure, wait for the controller's agent to deliver
# it to every slurmd and give each a moment to reload: 22.05 reports no end of a slurmd reload.
#
# slurmctld runs on this host: its start and the file's mtime are compared to the microsecond.
# Slurm gives a slurmd's start in whole seconds: one that started in the second the file was
# written counts as after it. Every slurmd the layer starts or restarts does so after this
# file (and then its own copy) was written; comparing whole seconds made ~60 % of first
# converges reconfigure for nothing (their daemons started within the file's second), 2 s each.
# A SlurmdStartTime that `date` cannot read (a node that never started) is skipped.

set -eu
written=$(stat -c %.9Y -- "$1")
ctld=$(date -d "$(systemctl show -p ActiveEnterTimestamp --value --timestamp=us+utc slurmctld.service)" +%s.%N)
slurmd=$(scontrol show node -o | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2 | while read -r t; do
  date -d "$t" +%s 2>/dev/null || :
done)
if printf '%s\n' "$slurmd" | awk -v w="$written" -v c="$ctld" '
  BEGIN { after = (c + 0 > w + 0); second = int(w) }
  NF && $1 + 0 < second { after = 0 }
  END { exit !after }'; then
  echo "slurmctld and every slurmd started after $1 was written: nothing to reconfigure"; exit 0
fi
scontrol reconfigure
for _ in $(seq 30); do
  [ "$(sdiag | awk -F: '/Agent queue size/ {gsub(/ /, "", $2); print $2; exit}')" = 0 ] && break
  sleep 1
done
sleep 2
