#!/bin/sh
# Every node's acceptance job at once (on the controller, as root): nodes this acceptance drained
# before are resumed to be judged again, every node must be idle (in the reservation), then one exclusive salloc per
# node runs node_job.sh as the canary user. Prints "== <node>" and the job's output per node, then
# "gres_used=<node> <GresUsed>" once the jobs ended.
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

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for spec in "$@"; do
  n=${spec%%:*} rest=${spec#*:}; count=${rest%%:*} type=${rest#*:}
  gres=""; [ "$count" -gt 0 ] && gres="--gres=gpu:$type:$count"
  # shellcheck disable=SC2086  # $gres is one word or none, $opts two
  (cd /tmp && timeout "$timeout" runuser -u "$user" -- env GF_STEP="$step" GF_DEEP="$deep" \
    salloc -N1 -w "$n" --exclusive $gres $opts -p "$part" -t "$(( (timeout + 59) / 60 ))" \
      -J gpu-fleet-acceptance sh -c "$node_job" node-job "$count" "$prefix" "$pynvml" "$root" "$ro" "$marker"
   echo "rc=$?") > "$out/$n" 2>&1 &
done
wait
for n in $names; do echo "== $n"; cat "$out/$n"; done
for n in $names; do
  echo "gres_used=$n $(scontrol -d show node -o "$n" | tr ' ' '\n' | sed -n 's/^GresUsed=//p')"
done
