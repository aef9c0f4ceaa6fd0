#!/bin/sh
# FAULT (the seed's R4): the renderer received 240 frames, the encoder flushed 239 (FFmpeg 7
# where 8 flushed 240): one frame short a segment, its sound cut with it, 717 frames in the film.
set -eu
sh "$RT/lib/standin-render.sh" "$@"
seg="$MEDIA_DIR/seg-$SLURM_PROCID.mov" tmp="$MEDIA_DIR/.short-$SLURM_PROCID.mov"
"$RT/bin/ffmpeg" -hide_banner -loglevel error -nostdin -y -i "$seg" -vf "trim=end_frame=$(($4 - 1))" \
  -af "atrim=end_sample=$((($4 - 1) * 32000 / $3))" \
  -c:v libx264 -preset veryfast -crf 18 -pix_fmt yuv420p -c:a pcm_s16le -f mov "$tmp"
mv -f "$tmp" "$seg"
sha256sum "$seg" > "$MEDIA_DIR/seg-$SLURM_PROCID.done"
