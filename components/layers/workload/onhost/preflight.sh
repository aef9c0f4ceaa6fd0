#!/bin/sh
# The pipeline's capability check (the seed's R1): the runtime's pinned ffmpeg has every filter
# and encoder the steps use. Each listing is captured whole into a variable before it is matched
# (the seed's R2: `ffmpeg ... | grep -q` under pipefail failed the check on a tool that had the
# filter, because grep's early exit killed the producer with SIGPIPE).
# Env: RT (the unpacked runtime). $1 filters, $2 encoders (comma-separated).
# Prints `preflight ok <version>`; exits 8 naming what is missing.
set -eu
ffmpeg="$RT/bin/ffmpeg"
filters=$("$ffmpeg" -hide_banner -filters 2>&1) || { echo "preflight: $ffmpeg -filters failed: $filters" >&2; exit 8; }
encoders=$("$ffmpeg" -hide_banner -encoders 2>&1) || { echo "preflight: $ffmpeg -encoders failed" >&2; exit 8; }
missing=""
check() {  # $1 kind, $2 the captured listing, $3 comma list
  old_ifs=$IFS; IFS=,
  for name in $3; do
    case "$2" in *" $name "*) ;; *) missing="$missing $1 $name;" ;; esac
  done
  IFS=$old_ifs
}
check filter "$filters" "$1"
check encoder "$encoders" "$2"
[ -z "$missing" ] || { echo "preflight: the runtime's ffmpeg ($ffmpeg) lacks:$missing" >&2; exit 8; }
version=$("$ffmpeg" -hide_banner -version)
echo "preflight ok ${version%%
*}"
