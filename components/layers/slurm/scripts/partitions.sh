#!/bin/sh
# The partitions' state, and the verdict that keeps it across a slurmctld restart.
#
# slurm.conf declares the partitions INACTIVE and only a passing acceptance opens them, with
# `scontrol update`, which slurmctld keeps in memory only: started again without -R it reads
# State= from slurm.conf. So opening them also records the verdict: which partitions, for which
# configuration (a hash of the controller's Slurm files). A restart reopens them only when the
# configuration is the one the verdict was for; closing them withdraws it first.
#
#   partitions.sh set UP|INACTIVE VERDICT CONFDIR PARTITION...
#   partitions.sh reopen VERDICT CONFDIR WAIT_S     (after slurmctld starts; never closes)

set -eu

# the Slurm files slurmctld reads, each named with its hash (slurmdbd's file is accounting's)
conf_hash() {
  for f in "$1"/*.conf "$1"/*.lua; do
    [ -f "$f" ] || continue
    case ${f##*/} in slurmdbd.conf) continue ;; esac
    sha256sum "$f"
  done | sha256sum | cut -d' ' -f1
}

mode=$1
shift
case $mode in
set)
  state=$1 verdict=$2 confdir=$3
  shift 3
  # closing: the verdict goes first, so no restart can reopen what is being closed
  [ "$state" = UP ] || rm -f "$verdict"
  for p in "$@"; do
    scontrol update "PartitionName=$p" "State=$state"
  done
  if [ "$state" = UP ]; then
    mkdir -p "$(dirname "$verdict")"
    { echo "conf $(conf_hash "$confdir")"; for p in "$@"; do echo "partition $p"; done; } > "$verdict.tmp"
    mv -f "$verdict.tmp" "$verdict"
  fi
  ;;
reopen)
  verdict=$1 confdir=$2 wait_s=$3
  if [ ! -f "$verdict" ]; then
    echo "gpu-fleet: no acceptance verdict ($verdict): the partitions stay as slurm.conf declares them"
    exit 0
  fi
  want=$(sed -n 's/^conf //p' "$verdict")
  have=$(conf_hash "$confdir")
  if [ "$want" != "$have" ]; then
    echo "gpu-fleet: the Slurm configuration changed since the acceptance that opened the partitions" \
         "(verdict $want, now $have): they stay closed until an acceptance passes again"
    exit 0
  fi
  end=$(( $(date +%s) + wait_s ))
  until out=$(scontrol ping 2>&1) && [ "${out#*is UP}" != "$out" ]; do
    if [ "$(date +%s)" -ge "$end" ]; then
      echo "gpu-fleet: slurmctld does not answer after $wait_s s: the partitions stay closed: $out"
      exit 0
    fi
    sleep 0.5
  done
  sed -n 's/^partition //p' "$verdict" | while read -r p; do
    if scontrol update "PartitionName=$p" State=UP; then
      echo "gpu-fleet: partition $p reopened (the acceptance verdict for this configuration)"
    else
      echo "gpu-fleet: partition $p could not be reopened: it stays closed"
    fi
  done
  ;;
*)
  echo "partitions.sh: unknown mode $mode" >&2
  exit 2
  ;;
esac
