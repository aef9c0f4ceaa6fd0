#!/bin/sh
# One task of a workload job (each srun rank, or the job's single task): stages the runtime into
# the job's node-local directory, runs one step script of it with the runtime's tools, and removes
# that directory when the task ends however it ends (the traps: exit; SIGTERM from scancel or a
# time limit, which also kills what still runs from the runtime, reap.sh). Slurm's Epilog
# (epilog.sh) is the backstop for what a trap cannot catch (the task's shell killed outright).
# Env: SLURM_JOB_ID (Slurm's), JOB_BASE (node-local, default /var/tmp/gpu-fleet-workload).
# $1 the archive, $2 its SHA-256 (as P0 recorded it), $3 the step (lib/<name> in the runtime),
# then the step's arguments.
set -eu
archive=$1 sha=$2 name=$3
shift 3
job=${SLURM_JOB_ID:?not a Slurm job}
JOBDIR="${JOB_BASE:-/var/tmp/gpu-fleet-workload}/$job"
here=${0%/*}
# this task's own directory only: another task's or job's on this node is not this one's to remove
mine="$JOBDIR.$$"
trap 'rm -rf "$mine"' EXIT
trap 'sh "$here/reap.sh" "$mine" >/dev/null; exit 143' TERM INT
mkdir -p "$mine"
sh "$here/stage.sh" "$archive" "$sha" "$mine" >&2
RT="$mine/runtime"
export RT
# in the background: a trapped signal interrupts `wait` at once, not after the step ends
"$RT/lib/$name" "$@" &
rc=0
wait "$!" || rc=$?
# the seed's two naive failures, named (the step's own words are above in the job's output)
case $rc in
  127) echo "task.sh: $name ran a command that is not there (exit 127): a job finds its tools in the runtime" \
         "($RT/bin) by path, never on the batch PATH ($PATH)" >&2 ;;
  141) echo "task.sh: $name died of SIGPIPE (exit 141): a reader closed its pipe while the step still wrote" \
         "to it, as \`grep -q\` does under pipefail; capture the output whole, then search it" >&2 ;;
esac
exit "$rc"
