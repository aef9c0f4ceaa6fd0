#!/bin/sh
# Prints "JobID|<fields>" lines for the given jobs or steps as accounting recorded them, waiting up
# to 60 s until every one has a final record: no field empty, no state still PENDING or RUNNING
# (a job's record lands in parts, a few seconds after it ends).
# $1 the fields (sacct -o), then the job or step ids.

fields=$1; shift
ids=$(echo "$@" | tr ' ' ',')
for _ in $(seq 60); do
  out=$(sacct -n -P -j "$ids" -o "JobID,$fields" 2>/dev/null)
  found=0
  for id in "$@"; do
    echo "$out" | grep "^$id|" | head -n1 | grep -Eqv '(\|\||\|$|\|(PENDING|RUNNING)(\||$))' \
      && found=$((found + 1))
  done
  [ "$found" -eq "$#" ] && break
  sleep 1
done
for id in "$@"; do echo "$out" | grep "^$id|" | head -n1; done
