#!/bin/sh
# Validates a candidate slurm.conf with a throw-away `slurmctld -D` on its own port, state and log.
# $1 candidate file, $2 test port, $3 timeout (s), $4 live slurm.conf path (its directory has the
# files slurm.conf names: cgroup.conf, gres.conf, topology.conf, job_submit.lua).

set -u
new="$1"; port="$2"; limit="$3"; etc=$(dirname -- "$4")
d=$(mktemp -d /run/gpu-fleet-slurmconf.XXXXXX)
pid=
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap, which shellcheck 0.9 does not follow
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf -- "$d"
}
trap cleanup EXIT
# SlurmUser must reach its state directory inside the (0700) temp directory
chmod 0711 "$d" && mkdir -p -- "$d/state" && chown slurm: "$d/state" || exit 1
for f in cgroup.conf gres.conf topology.conf job_submit.lua; do [ -f "$etc/$f" ] && cp -- "$etc/$f" "$d/"; done
sed -e "s|^SlurmctldPort=.*|SlurmctldPort=$port|" \
    -e "s|^StateSaveLocation=.*|StateSaveLocation=$d/state|" \
    -e "s|^SlurmctldPidFile=.*|SlurmctldPidFile=$d/slurmctld.pid|" \
    -e "s|^SlurmctldLogFile=.*|SlurmctldLogFile=$d/slurmctld.log|" \
    -e '/^AccountingStorage/d' -e '/^JobAcctGather/d' -e '/^AuthAlt/d' -- "$new" > "$d/slurm.conf"
chmod 0644 "$d/slurm.conf"
SLURM_CONF="$d/slurm.conf" slurmctld -D -f "$d/slurm.conf" > "$d/out" 2>&1 &
pid=$!
i=0
# polled every 50 ms: the test daemon takes ~0.05-0.1 s, and the nodes' copies wait on this
while [ "$i" -lt $((limit * 20)) ]; do
  if grep -qs "Running as primary controller" "$d/slurmctld.log" "$d/out"; then
    echo "slurm.conf validated: a test slurmctld on port $port took it"; exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"; rc=$?; pid=
    echo "slurm.conf refused: a test slurmctld on this file exited $rc:" >&2
    cat "$d/out" "$d/slurmctld.log" 2>/dev/null | grep -v 'pmix' | tail -n 20 >&2
    exit 1
  fi
  sleep 0.05; i=$((i + 1))
done
echo "slurm.conf not validated: a test slurmctld did not come up within $limit s:" >&2
tail -n 20 "$d/slurmctld.log" "$d/out" >&2 2>/dev/null
exit 1
