#!/bin/sh
# Writes stdin atomically to a file: a temp file beside it gets owner and mode, is validated, then renamed.
# $1 path, $2 owner, $3 group, $4 mode; then an optional validate argv ("{}" is the temp file's path).

set -eu
p="$1"; o="$2"; g="$3"; m="$4"; shift 4
d=$(dirname -- "$p"); mkdir -p -- "$d"
t=$(mktemp "$d/.gpu-fleet.XXXXXX")
trap 'rm -f -- "$t"' EXIT
cat > "$t"
chown -- "$o:$g" "$t"; chmod -- "$m" "$t"
if [ "$#" -gt 0 ]; then
  n=0; for a in "$@"; do n=$((n+1)); if [ "$a" = "{}" ]; then set -- "$@" "$t"; else set -- "$@" "$a"; fi; done
  shift "$n"; "$@"
fi
mv -f -- "$t" "$p"; trap - EXIT
