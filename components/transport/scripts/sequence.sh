#!/bin/sh
# Runs one resource's planned steps, in order, in one SSH round trip, then the read that checks
# them (components/transport/sequence.py). Arguments come in pairs: the bytes of this command's
# stdin that are the step's own stdin ("-" or 0: none, the step reads /dev/null; "read": the read after
# the steps, with no stdin either), then the step's
# command line. After each step, a frame: "== gf-seq <n> <exit code> <stdout bytes> <stderr
# bytes>", then those bytes, stdout first. Stops after the first step that fails.
# Writing a frame is also the check that the client is still there: once it is gone (the run
# was stopped), the write fails and this shell exits before the next step starts.
set -u
d=$(mktemp -d) || exit 125
trap 'rm -rf -- "$d"' EXIT
trap 'exit 141' PIPE
trap 'exit 129' HUP
n=0
while [ "$#" -ge 2 ]; do
  n=$((n + 1))
  len=$1; c=$2; shift 2
  if [ "$len" = - ] || [ "$len" = 0 ] || [ "$len" = read ]; then
    sh -c "$c" </dev/null >"$d/out" 2>"$d/err"
  else
    # exactly its own bytes: dd reads no further, so the next step's stdin stays in place
    dd bs="$len" count=1 iflag=fullblock status=none | sh -c "$c" >"$d/out" 2>"$d/err"
  fi
  rc=$?
  printf '== gf-seq %s %s %s %s\n' "$n" "$rc" "$(($(wc -c <"$d/out")))" "$(($(wc -c <"$d/err")))" || exit 141
  cat "$d/out" "$d/err" || exit 141
  [ "$rc" -eq 0 ] || exit 0
done
