#!/bin/sh
# A node's acceptance job: the batch script sbatch runs on the node (its output file is fetched
# afterwards), its steps one kind after another, every line prefixed by its step kind. From the
# environment: GF_STEP step.sh; GF_DEEP the stack's node deep checks, one per line: name,
# timeout (s), command, tab-separated; GF_COUNT the node's GPU count, GF_PREFIX the GPU device
# prefix, GF_PYNVML the pynvml dir ("" without the GPU layer), GF_ROOT the job root, GF_RO the
# read-only store ("" for none), GF_MARKER the model marker ("" for none).

count=$GF_COUNT prefix=$GF_PREFIX
set -- "" "" "$GF_PYNVML" "$GF_ROOT" "$GF_RO" "$GF_MARKER"
echo "job=$SLURM_JOB_ID"

# Wait (GF_SETTLE s, 30 by default) until the controller holds no step of this job but its
# batch and extern ones. srun returns once its tasks exit; slurmctld frees the step's resources
# when slurmstepd's completion reaches it, which a busy controller (one just restarted) does later.
# A step asked for meanwhile is refused as busy, and its srun retries when woken or after
# SlurmctldTimeout plus 0-9 s (srun's launch.c; 120 s by default): far past the single-GPU
# steps' 60 s barrier. Printed if the wait ran out: the steps still held.
settle() {
  end=$(( $(date +%s) + ${GF_SETTLE:-30} ))
  while :; do
    steps=$(squeue -h -s -j "$SLURM_JOB_ID" -o %i 2>/dev/null)
    [ "$(printf '%s\n' "$steps" | grep -c '^[0-9]*\.[0-9][0-9]*$')" -eq 0 ] && return 0
    if [ "$(date +%s)" -ge "$end" ]; then echo "settle.held=$(printf '%s' "$steps" | tr '\n' ' ')"; return 0; fi
    sleep 0.2
  done
}
gres=""; [ "$count" -gt 0 ] && gres="--gres=gpu:$count"
# shellcheck disable=SC2086  # $gres is one word or none
srun -n1 $gres sh -c "$GF_STEP" step inventory "$prefix" "$count" "$3" "$6" 2>&1 | sed 's/^/inventory./'
settle
i=0
while [ "$i" -lt "$count" ]; do
  srun -n1 -O --exact --gres=gpu:1 --mem=16 sh -c "$GF_STEP" step gpu "$prefix" "$count" 2>&1 \
    | sed 's/^/gpu./' &
  i=$((i + 1))
done
wait
settle
out=$(srun -n1 -c1 --exact --mem=32 sh -c "$GF_STEP" step oom 256 2>&1); echo "oom.rc=$?"
echo "$out" | sed 's/^/oom./'
out=$(srun -n1 -c1 --exact --mem=32 sh -c "$GF_STEP" step fs "$4" "$5" 2>&1); echo "fs.rc=$?"
echo "$out" | sed 's/^/fs./'
srun -n1 -c1 --exact --mem=32 sh -c "$GF_STEP" step residue "$4" 2>&1 | sed 's/^/residue./'
tab=$(printf '\t')
printf '%s\n' "${GF_DEEP:-}" | while IFS=$tab read -r name limit cmd; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086  # $gres is one word or none
  out=$(srun -n1 $gres --input=none timeout "$limit" sh -c "$cmd" 2>&1); rc=$?
  echo "$out" | tail -n 40 | sed "s/^/deep.$name.out=/"
  echo "deep.$name.rc=$rc"
done
echo "done=1"
