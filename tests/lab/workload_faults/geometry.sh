#!/bin/sh
# FAULT (the seed's G1-G3): the launcher drops the geometry on its way to the renderer, which
# renders its default canvas (the STAND-IN's 1216x768) and prints what it received.
exec sh "$RT/lib/standin-render.sh" "" "" "$3" "$4"
