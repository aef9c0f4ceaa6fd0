#!/bin/sh
# Stages the workload runtime on this node for one job (the P0 job, and every job after it):
# copies the archive node-local, checks the copy's SHA-256 against the one P0 recorded (the seed:
# a runtime verified by hash before every use; an archive changed after P0 is refused, naming
# both hashes), unpacks it into the job's own directory and checks every file against the
# archive's SHA256SUMS. The tools are then used by absolute path only, never from PATH.
# $1 the archive (runtime.tar.zst, on the shared store), $2 its SHA-256, $3 the job's directory
# (node-local; the runtime lands in $3/runtime). Prints `runtime ok <sha256> <dir>`.
set -eu
archive=$1 want=$2 dest=$3/runtime
mkdir -p "$3"
rm -rf "$dest" "$dest.tmp" "$dest.tar.zst"
cp "$archive" "$dest.tar.zst"
have=$(sha256sum "$dest.tar.zst")
have=${have%% *}
if [ "$have" != "$want" ]; then
  rm -f "$dest.tar.zst"
  echo "runtime $archive has SHA-256 $have, not $want: it changed after P0 staged it" >&2
  exit 4
fi
mkdir "$dest.tmp"
zstd -q -dc "$dest.tar.zst" > "$dest.tar"
tar -x -C "$dest.tmp" -f "$dest.tar"
rm -f "$dest.tar" "$dest.tar.zst"
if ! out=$(cd "$dest.tmp" && sha256sum -c --strict SHA256SUMS 2>&1); then
  echo "runtime $archive unpacked with files that differ from its SHA256SUMS:" >&2
  printf '%s\n' "$out" | grep -v ': OK$' >&2 || true
  exit 4
fi
mv "$dest.tmp" "$dest"
echo "runtime ok $have $dest"
