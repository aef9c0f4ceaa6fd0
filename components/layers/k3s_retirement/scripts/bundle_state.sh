#!/bin/bash
# On the storage host (read-only): what one node's bundle under a change already holds: the
# baseline, every finished step's marker, the node's manifest and the change's seal.
# $1 the change directory, $2 the node.
c="$1"; n="$2"
echo "== baseline"; cat -- "$c/$n/baseline.json" 2>/dev/null; echo
echo "== steps"
for m in "$c/$n"/steps/*.done; do
  [ -f "$m" ] || continue
  s=${m##*/}; echo "${s%.done} $(cat -- "$m")"
done
echo "== manifest"; cat -- "$c/$n/manifest.json" 2>/dev/null; echo
echo "== seal"; cat -- "$c/$n/SEAL" 2>/dev/null; echo
exit 0
