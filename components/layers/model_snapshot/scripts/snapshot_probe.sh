#!/bin/sh
# Read-only: the published snapshot's manifest and its independent check (sizes, JSON, safetensors headers,
# shard indexes, against its own manifest) and the downloader's last status.
# $1 the venv's python, $2 verify.py, $3 published path, $4 its manifest, $5 the state directory.

py="$1"; verify="$2"; dest="$3"; manifest="$4"; state="$5"
echo "== published"
if [ -d "$dest" ] && [ -f "$manifest" ]; then echo yes; else echo no; fi
echo "== manifest-sha256"
sha256sum -- "$manifest" 2>/dev/null | cut -d' ' -f1
echo "== manifest"
cat -- "$manifest" 2>/dev/null
echo "== check"
if [ -d "$dest" ] && [ -f "$manifest" ]; then "$py" "$verify" check --root "$dest" --manifest "$manifest" 2>&1; fi
echo "== status"
cat -- "$state/status.json" 2>/dev/null
