#!/bin/bash
# On the storage host: write stdin to $1 only if it does not exist yet, then make it read-only
# (an immutable baseline or seal is never overwritten). Prints `written` or `kept`.
set -euo pipefail
umask 077
mkdir -p -- "$(dirname -- "$1")"
if [ -e "$1" ]; then cat >/dev/null; echo kept; exit 0; fi
cat > "$1.part"
chmod 0400 -- "$1.part"
# no -f: a file another run wrote meanwhile is kept
if mv -n -- "$1.part" "$1" && [ ! -e "$1.part" ]; then echo written; else rm -f -- "$1.part"; echo kept; fi
