#!/bin/sh
# Keep a primitive's record on its host, before its first change there: the record (JSON) on
# stdin, written whole (a temporary file renamed over) and private to root. $1: its path.
set -eu
umask 077
mkdir -p -- "$(dirname -- "$1")"
cat > "$1.tmp"
mv -f -- "$1.tmp" "$1"
