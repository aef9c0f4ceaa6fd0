#!/bin/sh
# The canary job itself (under srun): reports its id, node, GPUs, cgroup, marker and job root as key=value.
# $1 model marker path ("" for none), $2 job root, $3 a read-only store to try writing into ("" for none).

echo "job=$SLURM_JOB_ID"
echo "node=$(hostname)"
echo "cvd=$CUDA_VISIBLE_DEVICES"
echo "cgroup=$(grep -E ':(devices|memory):' /proc/self/cgroup | head -n1 | cut -d: -f3)"
if [ -n "$1" ]; then if [ -r "$1" ]; then echo "marker=ok"; else echo "marker=unreadable"; fi
else echo "marker=none"; fi
d="$2/gpu-fleet-canary-$SLURM_JOB_ID"
if mkdir -p "$d" && echo probe > "$d/probe" && rm -rf "$d" && [ ! -e "$d" ]; then echo "jobroot=ok"
else echo "jobroot=failed"; fi
if [ -n "${3:-}" ]; then
  f="$3/gpu-fleet-canary-$SLURM_JOB_ID"
  if (echo probe > "$f") 2>/dev/null; then rm -f "$f"; echo "rowrite=allowed"; else echo "rowrite=refused"; fi
else echo "rowrite=none"; fi
