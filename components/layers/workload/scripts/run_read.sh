#!/bin/sh
# What a pipeline run left on the data store, read on the storage host (server side, so no client
# cache stands between): the release if it was published (final.done, release.sha256, the gates'
# verification.json), else the attempt's verification if the gates ran; the contact sheet; and
# the last lines of each job's output.
# $1 the releases directory, $2 the runs directory, $3 the run (P0's id), $4 the release (the
# render job's id), then the job ids whose output to show.
set -u
releases=$1 runs=$2 run=$3 release=$4
shift 4
dir="$releases/$release"
if [ -d "$dir" ] && [ ! -L "$dir" ]; then
  echo "== published"; echo yes
  echo "== final.done"; cat "$dir/final.done" 2>/dev/null
  echo "== release.sha256"; cat "$dir/release.sha256" 2>/dev/null
  echo "== verification"; cat "$dir/verification.json" 2>/dev/null
else
  echo "== published"; echo no
  echo "== verification"; cat "$runs/$run/attempt/verification.json" 2>/dev/null
fi
echo "== joins"; [ -f "$runs/$run/joins.png" ] && echo "$runs/$run/joins.png"
for j in "$@"; do
  echo "== out $j"; tail -n 20 "$runs/slurm-$j.out" 2>/dev/null
done
exit 0
