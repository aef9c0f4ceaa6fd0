#!/bin/bash
# FAULT (the seed's R2): the filter checked the naive way. `ffmpeg -h full` writes more than a
# pipe holds; grep -q exits at its first match, ffmpeg dies of SIGPIPE, and pipefail turns a
# filter that is there into a failed step (141).
set -euo pipefail
"$RT/bin/ffmpeg" -hide_banner -h full 2>/dev/null | grep -q ssim
exec sh "$RT/lib/standin-render.sh" "$@"
