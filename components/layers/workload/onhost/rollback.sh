#!/bin/sh
# Rolls one release back, as the seed's rollback did: only a rename of the job's publication to a
# fixed archive name (<publish_root>/.rolled-back/<job id>), after asserting what it moves, and a
# proof afterwards that nothing else changed. Before: the job's Slurm state is COMPLETED with exit
# code 0:0 (the caller reads sacct); the publication is a directory, not a symlink, whose real
# path is <publish_root>/<job id>; it holds exactly final.mp4, verification.json, release.sha256
# and final.done, regular files, matching release.sha256 and final.done's film hash. After: every
# file under each watched path (the source segments, the previous release, a rejected attempt)
# has the size, time and SHA-256 it had before.
# $1 publish root, $2 job id, $3 the job's state, $4 its exit code, then the watched paths.
set -eu
root=$1 job=$2 state=$3 code=$4
shift 4
dir="$root/$job" dest="$root/.rolled-back/$job"
fail() { echo "rollback of $job refused: $*" >&2; exit 6; }
[ "$state $code" = "COMPLETED 0:0" ] || fail "its Slurm state is $state $code, not COMPLETED 0:0"
if [ ! -d "$dir" ] || [ -L "$dir" ]; then fail "$dir is not a directory (or is a symlink)"; fi
[ "$(realpath "$dir")" = "$(realpath "$root")/$job" ] || fail "$dir resolves to $(realpath "$dir")"
have=$(cd "$dir" && find . -mindepth 1 -printf '%y %P\n' | LC_ALL=C sort | tr '\n' ' ')
[ "$have" = "f final.done f final.mp4 f release.sha256 f verification.json " ] \
  || fail "$dir holds [$have], not exactly final.done final.mp4 release.sha256 verification.json"
( cd "$dir" && sha256sum -c --quiet --strict release.sha256 ) >/dev/null 2>&1 || fail "$dir does not match its release.sha256"
film=$(sha256sum "$dir/final.mp4")
grep -q "\"film_sha256\": \"${film%% *}\"" "$dir/final.done" || fail "final.done names another film"
[ ! -e "$dest" ] || fail "$dest already exists"
snapshot() {
  for p in "$@"; do
    find "$p" -type f -printf '%p %s %T@ ' -exec sha256sum {} \; 2>&1 | LC_ALL=C sort
  done
}
before=$(snapshot "$@")
mkdir -p "$root/.rolled-back"
mv -T "$dir" "$dest"
after=$(snapshot "$@")
if [ "$before" != "$after" ]; then
  echo "rollback of $job moved $dir to $dest, but something else changed meanwhile:" >&2
  printf '%s\n' "$before" > "$dest.before"
  printf '%s\n' "$after" | diff "$dest.before" - >&2 || true
  rm -f "$dest.before"
  exit 7
fi
echo "rolled back $job: $dir -> $dest ($# watched paths unchanged)"
