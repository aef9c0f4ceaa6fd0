#!/bin/sh
# Every node's acceptance job at once (on the controller, as root): nodes this acceptance drained
# before are resumed to be judged again, every node must be idle (in the reservation), then one
# exclusive batch job per node runs node_job.sh as the canary user on that node (so the steps'
# clients run there, not here; its output stays in the node's /tmp for the caller to fetch).
# Prints "== <node>", "submitted=<job id>" and "rc=0" (or the job's end state and exit code)
# per node, then "gres_used=<node> <GresUsed>" once every job ended.
# $1 timeout (s), $2 canary user, $3 partition, $4 salloc's --mem and --reservation, $5 node_job.sh, $6 step.sh,
# $7 GPU device prefix, $8 pynvml dir, $9 job root, $10 read-only store, $11 model marker,
# $12 the node deep checks (node_job.sh's GF_DEEP), then "<node>:<gpu count>:<gpu type>" per node.

timeout=$1 user=$2 part=$3 opts=$4 node_job=$5 step=$6 prefix=$7 pynvml=$8 root=$9
ro=${10} marker=${11} deep=${12}
shift 12
names=""
for spec in "$@"; do names="$names ${spec%%:*}"; done

for n in $names; do
  reason=$(sinfo -h -n "$n" -o '%E' 2>/dev/null | head -n1)
  case "$reason" in "gpu-fleet acceptance:"*) scontrol update "NodeName=$n" State=RESUME ;; esac
done

deadline=$(( $(date +%s) + timeout ))
while :; do
  # shellcheck disable=SC2086  # one node name per word
  view=$(sinfo -h -N -o '%N %T' "--nodes=$(echo $names | tr ' ' ',')" 2>&1)
  [ -n "$view" ] && [ -z "$(echo "$view" | awk '$2 !~ /^(idle|mixed|allocated|reserved)$/')" ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "== not ready"; echo "$view"; sinfo -h -R -o '%N %T %E' 2>&1; exit 3
  fi
  sleep 2
done

ids=""
for spec in "$@"; do
  n=${spec%%:*} rest=${spec#*:}; count=${rest%%:*} type=${rest#*:}
  gres=""; [ "$count" -gt 0 ] && gres="--gres=gpu:$type:$count"
  # shellcheck disable=SC2086  # $gres is one word or none, $opts two
  id=$(printf '#!/bin/sh\n%s\n' "$node_job" | (cd /tmp && runuser -u "$user" -- env GF_STEP="$step" \
    GF_DEEP="$deep" GF_COUNT="$count" GF_PREFIX="$prefix" GF_PYNVML="$pynvml" GF_ROOT="$root" GF_RO="$ro" \
    GF_MARKER="$marker" sbatch --parsable -N1 -w "$n" --exclusive $gres $opts -p "$part" \
      -t "$(( (timeout + 59) / 60 ))" -J gpu-fleet-acceptance -o /tmp/gpu-fleet-acceptance-%j.out) 2>&1)
  case "${id%%;*}" in
    ''|*[!0-9]*) id="not-submitted:$(echo "$id" | tr -s ' \n\t' '___' | cut -c1-200)" ;;
    *) id=${id%%;*} ;;
  esac
  ids="$ids $n=$id"
done

deadline=$(( $(date +%s) + timeout ))
while [ -n "$(squeue -h -u "$user" -n gpu-fleet-acceptance -t PD,R,CG,CF,S -o %i 2>/dev/null)" ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    scancel -u "$user" -n gpu-fleet-acceptance; sleep 2; break
  fi
  sleep 1
done

for pair in $ids; do
  n=${pair%%=*} id=${pair#*=}
  echo "== $n"
  case "$id" in
    *[!0-9]*|"") echo "rc=$id" ;;
    *)
      echo "submitted=$id"
      job=$(scontrol show job -o "$id" 2>&1)
      state=$(echo "$job" | tr ' ' '\n' | sed -n 's/^JobState=//p')
      code=$(echo "$job" | tr ' ' '\n' | sed -n 's/^ExitCode=//p')
      if [ "$state" = COMPLETED ] && [ "$code" = 0:0 ]; then echo "rc=0"; else echo "rc=${state:-unknown} $code"; fi ;;
  esac
done
for n in $names; do
  echo "gres_used=$n $(scontrol -d show node -o "$n" | tr ' ' '\n' | sed -n 's/^GresUsed=//p')"
done
