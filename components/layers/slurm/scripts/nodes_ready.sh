#!/bin/sh
# Waits until every expected Slurm node is idle, mixed or allocated, or drained by the fleet
# acceptance (it judges that node again itself). $1: seconds to wait, then the expected nodes.
# Prints "node state" lines once all are ready, or the last view (and reasons) on timeout (exit 3).

deadline=$(( $(date +%s) + $1 )); shift
while :; do
  view=$(sinfo -h -N -o '%N %T %E' "--nodes=$(echo "$@" | tr ' ' ',')" 2>&1)
  bad=$(echo "$view" | awk '$2 !~ /^(idle|mixed|allocated)$/ && !($2 ~ /^drain/ && $3 " " $4 == "gpu-fleet acceptance:")')
  if [ -n "$view" ] && [ -z "$bad" ]; then echo "$view" | cut -d' ' -f1,2; exit 0; fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "$view"; echo "== reasons"; sinfo -h -R -o '%N %T %E' 2>&1; exit 3
  fi
  sleep 2
done
