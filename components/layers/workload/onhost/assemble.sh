#!/bin/sh
# The assembly job (CPU): the segments, in order, into one film: video concatenated and encoded
# once (H.264), sound concatenated sample-exact and trimmed to the declared sample count, then
# encoded once (AAC), so the last audio packet ends at the declared tick (the seed's 960,000 at
# 32 kHz for 30 s). Every segment's receipt is checked against its file first, in the same
# $MEDIA_DIR the render wrote (the seed's R3). Writes $ATTEMPT_DIR/final.mp4.
# Env: RT (the unpacked runtime), MEDIA_DIR, ATTEMPT_DIR. $1 segments, $2 audio samples.
set -eu
n=$1 samples=$2
ffmpeg="$RT/bin/ffmpeg"
inputs="" graph=""
i=0
while [ "$i" -lt "$n" ]; do
  seg="$MEDIA_DIR/seg-$i.mov"
  [ -f "$MEDIA_DIR/seg-$i.done" ] || { echo "segment $i has no receipt in $MEDIA_DIR" >&2; exit 3; }
  ( cd / && sha256sum -c --quiet "$MEDIA_DIR/seg-$i.done" ) >/dev/null 2>&1 \
    || { echo "segment $i does not match its receipt ($seg)" >&2; exit 3; }
  inputs="$inputs -i $seg"
  graph="${graph}[$i:v][$i:a]"
  i=$((i + 1))
done
mkdir -p "$ATTEMPT_DIR"
# shellcheck disable=SC2086  # $inputs: one -i and one path a segment (paths without blanks)
"$ffmpeg" -hide_banner -loglevel error -nostdin -y $inputs \
  -filter_complex "${graph}concat=n=$n:v=1:a=1[v][a0];[a0]atrim=end_sample=${samples}[a]" \
  -map "[v]" -map "[a]" -c:v libx264 -preset veryfast -crf 18 -pix_fmt yuv420p \
  -c:a aac -b:a 128k -ar 32000 -ac 2 -movflags +faststart "$ATTEMPT_DIR/.final.tmp.mp4"
mv -f "$ATTEMPT_DIR/.final.tmp.mp4" "$ATTEMPT_DIR/final.mp4"
echo "assembled $n segments: $ATTEMPT_DIR/final.mp4"
