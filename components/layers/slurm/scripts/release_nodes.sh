#!/bin/bash
# Before slurmctld takes a slurm.conf without some nodes it serves now (a K3s node handed back, a
# node taken out of every partition): drain those nodes and wait until no job runs on them, so
# Slurm releases a node before anything else comes back on it. Nothing to do on a first install
# (slurmctld not answering). A node this step drained that the new slurm.conf keeps (a run that
# released it and then stopped before slurmctld took its config) is resumed: the drain was ours.
# $1 the new slurm.conf, $2 how long to wait for jobs (seconds).
set -euo pipefail
conf="$1"; wait_s="$2"
reason="gpu-fleet: leaving the cluster"
# this host's slurmctld not running (a first install): no node to release, and scontrol would
# spend its message timeout (~10 s) finding that out
systemctl is-active --quiet slurmctld.service || exit 0
nodes=$(timeout 20 scontrol show nodes -o 2>/dev/null) || exit 0
known=$(printf '%s\n' "$nodes" | sed -n 's/^NodeName=\([^ ]*\).*/\1/p')
keep=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$conf")
for n in $known; do
  # here-strings, not pipes: under pipefail a grep -q that stops reading early kills the
  # writer, and a node the new slurm.conf keeps would read as leaving
  if grep -qxF -- "$n" <<<"$keep"; then
    line=$(grep "^NodeName=$n " <<<"$nodes" || true)
    if [[ $line == *"Reason=$reason"* ]]; then
      echo "resuming $n (back in the new slurm.conf; drained by an earlier release)"
      scontrol update NodeName="$n" State=RESUME
    fi
    continue
  fi
  echo "draining $n (not in the new slurm.conf)"
  scontrol update NodeName="$n" State=DRAIN Reason="$reason"
  end=$((SECONDS + wait_s))
  while [ -n "$(squeue -h -w "$n" -o %i 2>/dev/null)" ]; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "jobs still run on $n after ${wait_s} s: $(squeue -h -w "$n" -o '%i %u %j' | head -5 | tr '\n' ';')" >&2
      exit 1
    fi
    sleep 2
  done
done
