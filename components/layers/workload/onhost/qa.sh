#!/bin/sh
# The QA job's step: every gate over the assembled film (gates.py, with the runtime's ffmpeg), the
# joins' contact sheet beside the attempt (evidence, not part of the release), then the release
# (publish.sh) only when every gate passed. A failed gate publishes nothing and keeps the attempt
# for inspection.
# Env: RT (the unpacked runtime), RUN_DIR (spec.json, attempt/), PUBLISH_ROOT, GF_FILM_JOB (the
# render job's id: the release's name). $@ the join frames.
set -eu
attempt="$RUN_DIR/attempt"
rc=0
# the render job's output (beside the run, as its --output names it): what each rank printed it received
render_log="${RUN_DIR%/*}/slurm-${GF_FILM_JOB:?the render job id}.out"
python3 "$RT/lib/gates.py" "$RUN_DIR/spec.json" "$attempt/final.mp4" "$attempt/verification.json" "$render_log" \
  || rc=$?
if [ "$#" -gt 0 ] && [ -f "$attempt/final.mp4" ]; then
  sh "$RT/lib/contact_sheet.sh" "$attempt/final.mp4" "$RUN_DIR/joins.png" "$@" \
    || echo "qa: the contact sheet could not be made" >&2
fi
if [ "$rc" -ne 0 ]; then
  echo "qa: a gate failed (gates.py exit $rc): nothing published; the attempt stays in $attempt" >&2
  exit "$rc"
fi
sh "$RT/lib/publish.sh" "$attempt" "$PUBLISH_ROOT" "$GF_FILM_JOB"
