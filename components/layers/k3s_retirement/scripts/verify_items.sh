#!/bin/bash
# On the storage host (read-only): SHA-256 and size of every item under a node's bundle, as
# `<sha256> <bytes> <path relative to items/>`, for the manifest and the seal's check.
# $1 the node's bundle directory.
set -euo pipefail
cd -- "$1/items"
find . -type f ! -name '*.part' -printf '%P\n' | LC_ALL=C sort | while IFS= read -r f; do
  echo "$(sha256sum -- "$f" | cut -d' ' -f1) $(stat -c %s -- "$f") $f"
done
