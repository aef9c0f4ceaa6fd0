#!/bin/sh
# STAND-IN for the video model (one rank of the render job): renders this rank's segment of the
# film as a pure function of global time, so segments rendered on different nodes meet exactly at
# their joins, as the seed's segments met at frozen anchors. A moving sine grating (the picture)
# and a 440 Hz tone over seeded pink noise (the sound), with the runtime's pinned ffmpeg.
# Prints `request_geometry WxH fps=F frames=N segment=K/S` before the heavy step (the seed's
# G1-G3: a geometry that never reached the renderer), then writes seg-K.mov (PCM sound: the joins
# stay sample-exact until the one AAC encode) and its receipt seg-K.done into the same $MEDIA_DIR
# (the seed's R3: one directory variable for both).
# Env: RT (the unpacked runtime), MEDIA_DIR, SLURM_PROCID, SLURM_NTASKS (Slurm's).
# $1 width, $2 height, $3 fps, $4 frames per segment. A geometry left out renders the default
# canvas 1216x768, as the seed's runner did when target_shape never reached it.
set -eu
w=${1:-1216} h=${2:-768} fps=$3 frames=$4
k=${SLURM_PROCID:?not a Slurm task} n=${SLURM_NTASKS:?not a Slurm task}
ffmpeg="$RT/bin/ffmpeg"
first=$((k * frames))
echo "request_geometry ${w}x${h} fps=$fps frames=$frames segment=$k/$n first_frame=$first"
start=$(awk -v f="$first" -v r="$fps" 'BEGIN { printf "%.6f", f / r }')
secs=$(awk -v f="$frames" -v r="$fps" 'BEGIN { printf "%.6f", f / r }')
# the sound sources run from global time 0 to the segment's end; atrim keeps this segment's part
end=$(awk -v s="$start" -v d="$secs" 'BEGIN { printf "%.6f", s + d }')
tmp="$MEDIA_DIR/.seg-$k.tmp.mov"
"$ffmpeg" -hide_banner -loglevel error -nostdin -y \
  -f lavfi -i "color=c=gray:s=${w}x${h}:r=$fps:d=$secs,format=yuv420p,geq=lum='128+90*sin(2*PI*(X/W+(N+$first)/72))':cb=128:cr=128" \
  -f lavfi -i "sine=f=440:r=32000:d=$end" \
  -f lavfi -i "anoisesrc=c=pink:seed=42:a=0.02:r=32000:d=$end" \
  -filter_complex "[1:a][2:a]amix=inputs=2:normalize=0,atrim=start=$start,asetpts=PTS-STARTPTS[a]" \
  -map 0:v -map "[a]" -c:v libx264 -preset veryfast -crf 18 -pix_fmt yuv420p -c:a pcm_s16le -f mov "$tmp"
mv -f "$tmp" "$MEDIA_DIR/seg-$k.mov"
sha256sum "$MEDIA_DIR/seg-$k.mov" > "$MEDIA_DIR/seg-$k.done"
echo "segment $k rendered: $MEDIA_DIR/seg-$k.mov"
