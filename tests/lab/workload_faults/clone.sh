#!/bin/sh
# FAULT (the seed's R5): the short segments of short.sh "fixed" by cloning their last frame back
# to 240: 720 frames, structurally valid, frozen for one frame at every segment's end.
set -eu
sh "$RT/lib/standin-render.sh" "$@"
seg="$MEDIA_DIR/seg-$SLURM_PROCID.mov" tmp="$MEDIA_DIR/.clone-$SLURM_PROCID.mov"
"$RT/bin/ffmpeg" -hide_banner -loglevel error -nostdin -y -i "$seg" \
  -vf "trim=end_frame=$(($4 - 1)),tpad=stop_mode=clone:stop=1" \
  -c:v libx264 -preset veryfast -crf 18 -pix_fmt yuv420p -c:a copy -f mov "$tmp"
mv -f "$tmp" "$seg"
sha256sum "$seg" > "$MEDIA_DIR/seg-$SLURM_PROCID.done"
