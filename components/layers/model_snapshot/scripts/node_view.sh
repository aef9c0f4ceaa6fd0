#!/bin/sh
# One node's view of the published snapshot through the models mount: every file with its size,
# the acceptance marker readable, and a write into the snapshot (must fail).
# $1 the snapshot's path on the node, $2 the marker file in it.

snap="$1"; marker="$2"
echo "== files"
timeout 60 find "$snap" -type f -printf '%s %P\n' 2>&1
echo "== marker"
if timeout 20 head -c 1 -- "$snap/$marker" >/dev/null 2>&1; then echo readable; else echo unreadable; fi
echo "== write"
f="$snap/.gpu-fleet-probe-$(hostname)-$$"
# shellcheck disable=SC2016 # $1 is the inner sh's
if err=$(timeout 20 sh -c 'echo probe > "$1"' sh "$f" 2>&1); then echo "allowed"; rm -f -- "$f"
else echo "refused $err"; fi
