#!/bin/sh
# Publishes a proven snapshot with one rename on one filesystem: the published path shows the
# whole snapshot or nothing. Runs as the download unit's last step, after verify.py proved
# every file (manifest) and the safetensors headers (check); refuses without a manifest.
# huggingface_hub's download bookkeeping (.cache) moves to the state directory; the manifest
# goes inside the snapshot; everything becomes root-owned and read-only.
# $1 staging directory, $2 state directory, $3 published path.

set -eu
stage="$1"; state="$2"; dest="$3"
exec 9>"$state/publish.lock"
flock 9
if [ -e "$dest" ]; then echo "already published: $dest"; exit 0; fi
if [ ! -s "$state/manifest.json" ]; then
  echo "error: $stage has no manifest ($state/manifest.json): not proven, not published" >&2; exit 1
fi
parent=$(dirname -- "$dest")
mkdir -p -- "$parent"
if [ "$(stat -c %d -- "$stage")" != "$(stat -c %d -- "$parent")" ]; then
  echo "error: $stage and $parent are on different filesystems; a rename would not be atomic" >&2; exit 1
fi
if [ -d "$stage/.cache" ]; then rm -rf -- "$state/hf-cache"; mv -T -- "$stage/.cache" "$state/hf-cache"; fi
mkdir -p -- "$stage/.gpu-fleet"
cp -- "$state/manifest.json" "$stage/.gpu-fleet/manifest.json"
chown -R root:root -- "$stage"
chmod -R a-w,a+rX -- "$stage"
sync -f "$stage/.gpu-fleet/manifest.json"
mv -T -- "$stage" "$dest"
sync -f "$dest"
echo "published: $dest"
