#!/bin/sh
# FAULT (the seed's R0): a render command that runs ffmpeg from the batch PATH, where a compute
# node has none; only the runtime's pinned $RT/bin/ffmpeg is there.
set -eu
ffmpeg -hide_banner -version >/dev/null
exec sh "$RT/lib/standin-render.sh" "$@"
