#!/bin/bash
# Stream one bundle item to stdout (to the storage host's receive.sh) and print its SHA-256 on
# stderr as `gpu-fleet-sha256 <hex>`, hashed from the same bytes as they leave.
# $1 the kind: file <path> | tar <path>... (relative to /) | pgdump <database>
set -euo pipefail
kind="$1"; shift
tmp=$(mktemp -d); trap 'rm -rf -- "$tmp"' EXIT
mkfifo "$tmp/f"
sha256sum < "$tmp/f" > "$tmp/sum" &
hasher=$!
case "$kind" in
  file) cat -- "$1" ;;
  tar) tar -C / --numeric-owner --xattrs -cpf - -- "$@" ;;
  pgdump) runuser -u postgres -- pg_dump -Fc -- "$1" ;;
  *) echo "send.sh: unknown kind $kind" >&2; exit 2 ;;
esac | tee "$tmp/f"
wait "$hasher"
echo "gpu-fleet-sha256 $(cut -d' ' -f1 "$tmp/sum")" >&2
