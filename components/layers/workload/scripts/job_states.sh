#!/bin/sh
# The pipeline's jobs as Slurm sees them, one line a job:
# `<id>|<state>|<exit code>|<reason>|<start>|<end>`:
# from accounting (sacct) when the cluster has it, else from slurmctld's memory (scontrol, which
# keeps a finished job for MinJobAge).
# $1 1 with accounting, 0 without; then the job ids.
set -u
acct=$1
shift
for j in "$@"; do
  if [ "$acct" = 1 ]; then
    line=$(sacct -X -n -P -j "$j" -o JobID,State,ExitCode,Reason,Start,End 2>/dev/null | head -1)
  else
    line=$(scontrol -o show job "$j" 2>/dev/null \
      | sed -n 's/.*JobId=\([0-9]*\) .*JobState=\([A-Z_]*\) Reason=\([^ ]*\) .* ExitCode=\([0-9:]*\) .* StartTime=\([^ ]*\) EndTime=\([^ ]*\) .*/\1|\2|\4|\3|\5|\6/p')
  fi
  echo "${line:-$j|UNKNOWN||||}"
done
