#!/bin/sh
# Runs read-only probes that arrived together in one SSH round trip (components/transport/batch.py):
# each argument is one probe's command line, run at once beside the others with stdin from
# /dev/null, its stdout and stderr kept apart. Prints, in argument order, a frame per probe:
# "== gf-batch <n> <exit code> <stdout bytes> <stderr bytes>", then those bytes, stdout first.

d=$(mktemp -d) || exit 125
trap 'rm -rf -- "$d"' EXIT
n=0
for c in "$@"; do
  n=$((n + 1))
  (sh -c "$c" </dev/null >"$d/$n.out" 2>"$d/$n.err"; echo "$?" >"$d/$n.rc") &
done
wait
i=0
while [ "$i" -lt "$n" ]; do
  i=$((i + 1))
  printf '== gf-batch %s %s %s %s\n' "$i" "$(cat "$d/$i.rc")" "$(($(wc -c <"$d/$i.out")))" "$(($(wc -c <"$d/$i.err")))"
  cat "$d/$i.out" "$d/$i.err"
done
