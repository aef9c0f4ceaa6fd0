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
gres=""; [ "$count" -gt 0 ] && gres="--gres=gpu:$count"
# shellcheck disable=SC2086  # $gres is one word or none
srun -n1 $gres sh -c "$GF_STEP" step inventory "$prefix" "$count" "$3" "$6" 2>&1 | sed 's/^/inventory./'
i=0
while [ "$i" -lt "$count" ]; do
  srun -n1 -O --exact --gres=gpu:1 --mem=16 sh -c "$GF_STEP" step gpu "$prefix" "$count" 2>/dev/null \
    | sed 's/^/gpu./' &
  i=$((i + 1))
done
wait
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
