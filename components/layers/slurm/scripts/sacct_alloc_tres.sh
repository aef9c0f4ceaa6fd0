#!/bin/sh
# Prints a job's AllocTRES as accounting recorded it, waiting up to 30 s for the record ("" if none).
# $1 the job id.

for _ in $(seq 30); do
  t=$(sacct -X -n -P -j "$1" -o AllocTRES 2>/dev/null | head -n1)
  [ -n "$t" ] && { echo "$t"; exit 0; }
  sleep 1
done
echo
