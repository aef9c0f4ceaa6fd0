#!/bin/sh
# FAULT (the seed's R3): the segment in $MEDIA_DIR, its receipt in a directory of the renderer's
# own choosing, so the assembly's check in $MEDIA_DIR finds none.
set -eu
sh "$RT/lib/standin-render.sh" "$@"
receipts="${MEDIA_DIR%/*}/receipts"
mkdir -p "$receipts"
mv -f "$MEDIA_DIR/seg-$SLURM_PROCID.done" "$receipts/"
