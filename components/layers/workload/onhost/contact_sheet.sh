#!/bin/sh
# The contact sheet of a film's joins (evidence beside verification.json): for each join frame J,
# frames J-2, J-1, J and J+1 side by side, one row a join, so a reader sees a frozen or skipped
# frame at a join without playing the film.
# Env: RT (the unpacked runtime). $1 the film, $2 the PNG to write, then the join frames.
set -eu
film=$1 out=$2
shift 2
[ "$#" -gt 0 ] || { echo "contact sheet: no join frame given" >&2; exit 2; }
expr=""
for j in "$@"; do
  expr="${expr:+$expr+}between(n\\,$((j - 2))\\,$((j + 1)))"
done
"$RT/bin/ffmpeg" -hide_banner -loglevel error -nostdin -y -i "$film" \
  -vf "select='$expr',tile=4x$#" -frames:v 1 -update 1 "$out"
echo "contact sheet: $out ($# joins)"
