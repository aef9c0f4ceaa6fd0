#!/bin/sh
# Publishes a film whose every gate passed (the QA job's last step): writes release.sha256 (the
# film's and the verification's SHA-256) and final.done into the attempt directory, then moves
# the whole directory to <publish_root>/<job id> with one rename(2), so a reader sees the release
# complete or not at all. A failed gate publishes nothing: the attempt stays where it is.
# $1 the attempt directory, $2 the publish root (same filesystem), $3 the Slurm job id.
# Prints `published <dir> <film sha256>`.
set -eu
attempt=$1 root=$2 job=$3
dest="$root/$job"
if [ ! -f "$attempt/final.mp4" ] || [ ! -f "$attempt/verification.json" ]; then
  echo "publish: $attempt lacks final.mp4 or verification.json" >&2; exit 5
fi
python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["passed"] is True else 1)' \
    "$attempt/verification.json" 2>/dev/null \
  || { echo "publish: $attempt/verification.json does not say every gate passed: nothing published" >&2; exit 5; }
[ ! -e "$dest" ] || { echo "publish: $dest already exists: a release is never overwritten" >&2; exit 5; }
mkdir -p "$root"
( cd "$attempt" && sha256sum final.mp4 verification.json > release.sha256 )
film=$(sha256sum "$attempt/final.mp4")
film=${film%% *}
printf '{"job": "%s", "film_sha256": "%s"}\n' "$job" "$film" > "$attempt/final.done"
mv -T "$attempt" "$dest"
echo "published $dest $film"
