#!/bin/sh
# Slurm's Epilog for the workload (slurmd runs it as root on every node of a job once the job has
# ended, however it ended: done, scancel, time limit, a task killed with SIGKILL whose trap never
# ran): removes the job's node-local runtime directories and logs what it found, so a cancelled
# render leaves no runtime on any node. Slurm's proctrack/cgroup has already killed the job's
# processes; anything still running from the job's directory is named in the log and killed.
# Env: SLURM_JOB_ID (Slurm's), JOB_BASE (default /var/tmp/gpu-fleet-workload), EPILOG_LOG.
set -u
# slurmd gives the Epilog no PATH of its own
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
job=${SLURM_JOB_ID:-}
base=${JOB_BASE:-/var/tmp/gpu-fleet-workload}
log=${EPILOG_LOG:-/var/log/gpu-fleet/workload-epilog.log}
case "$job" in ''|*[!0-9_]*) exit 0 ;; esac
for d in "$base/$job" "$base/$job".*; do
  [ -e "$d" ] || continue
  killed=$(sh "${0%/*}/reap.sh" "$d")
  rm -rf "$d"
  mkdir -p "${log%/*}"
  echo "$(date -u +%FT%TZ) job $job: removed $d${killed:+, killed $killed}" >> "$log"
done
exit 0
