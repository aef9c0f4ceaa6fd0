#!/bin/sh
# Reads one managed file: kind, mode/owner/group, SHA-256, whether its backup and parent dir exist.
# $1 the file's path, $2 its backup path. Prints "kind|meta|sha256|backup|parent ..." lines.

p="$1"; b="$2"
if [ -L "$p" ]; then echo "kind link"
elif [ -f "$p" ]; then echo "kind file"; stat -c 'meta %a %U %G' -- "$p"; echo "sha256 $(sha256sum -- "$p" | cut -d' ' -f1)"
elif [ -e "$p" ]; then echo "kind other"
else echo "kind absent"; fi
if [ -f "$b" ]; then echo "backup yes"; else echo "backup no"; fi
if [ -d "$(dirname -- "$p")" ]; then echo "parent yes"; else echo "parent no"; fi
