#!/bin/bash
# On the storage host: write stdin to one bundle item, atomically (a .part renamed once whole),
# readable by root only, and print `<sha256> <bytes>` of what landed. $1 the item's path.
set -euo pipefail
umask 077
mkdir -p -- "$(dirname -- "$1")"
cat > "$1.part"
sum=$(sha256sum -- "$1.part" | cut -d' ' -f1)
size=$(stat -c %s -- "$1.part")
mv -f -- "$1.part" "$1"
echo "$sum $size"
