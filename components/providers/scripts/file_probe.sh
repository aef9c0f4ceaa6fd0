#!/bin/sh
# Reads one managed file: kind, mode/owner/group, SHA-256, whether its backup and parent dir exist.
# $1 the file's path (absolute), $2 its backup path, $3 "pyc" to list the Python module's
# bytecode in __pycache__ too (and "python3 absent" where there is none to compile it).
# Prints "kind|meta|sha256|backup|parent|bytecode ..." lines; the sha256 line is sha256sum's
# own ("sha256 <hex>  <path>"). Forks only for stat and sha256sum (the parent from ${p%/*},
# no dirname or cut): a host's refresh runs this for every file.

p="$1"; b="$2"
if [ -L "$p" ]; then echo "kind link"
elif [ -f "$p" ]; then echo "kind file"; stat -c 'meta %a %U %G' -- "$p"; printf 'sha256 '; sha256sum -- "$p"
elif [ -e "$p" ]; then echo "kind other"
else echo "kind absent"; fi
if [ -f "$b" ]; then echo "backup yes"; else echo "backup no"; fi
if [ -d "${p%/*}/" ]; then echo "parent yes"; else echo "parent no"; fi
if [ "${3:-}" = pyc ]; then
  command -v python3 >/dev/null 2>&1 || echo "python3 absent"
  m="${p##*/}"
  for c in "${p%/*}/__pycache__/${m%.py}".*.pyc; do
    if [ -f "$c" ]; then echo "bytecode $c"; fi
  done
fi
